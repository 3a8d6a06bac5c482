// The activation-sparsity flags every program takes, in one place:
//   --sidecar PATH   the sidecar (default: <model>.kairox.gguf beside the model, if present)
//   --no-sparse      run dense even when a sidecar exists
//   --sparsity S     one of the sidecar's calibrated levels (default: its own)
//   --oracle         threshold only, no predictor (every neuron computed; quality bound)
//   --masked-dense   decode with dense kernels and masks (reference for the sparse kernels)
//   --trace PATH     record predicted and actual active neurons per token and layer
// Header-only, for the programs.
#pragma once

#include <set>
#include <string>

#include "common/cli_args.h"
#include "engine/engine.h"

namespace kx::cli {

inline const std::set<std::string>& SparseValueFlags() {
  static const std::set<std::string> kFlags = {"--sidecar", "--sparsity", "--trace"};
  return kFlags;
}
inline const std::set<std::string>& SparseSwitches() {
  static const std::set<std::string> kFlags = {"--no-sparse", "--oracle", "--masked-dense"};
  return kFlags;
}
inline std::set<std::string> WithSparse(std::set<std::string> flags, bool switches) {
  for (const std::string& f : switches ? SparseSwitches() : SparseValueFlags()) flags.insert(f);
  return flags;
}

inline constexpr char kSparseUsage[] =
    "activation sparsity (a sidecar from kairox-prepare):\n"
    "  --sidecar PATH        sidecar (default: <model>.kairox.gguf beside the model, if present)\n"
    "  --no-sparse           run dense even when a sidecar exists\n"
    "  --sparsity S          one of the sidecar's calibrated levels (default: its own)\n"
    "  --oracle              threshold only, no predictor (computes every neuron)\n"
    "  --masked-dense        dense kernels with masks (reference for the sparse kernels)\n"
    "  --trace PATH          record predicted and actual active neurons per token and layer\n";

inline void ApplySparseArgs(Args& args, EngineOptions* o) {
  o->sidecar = args.Str("--sidecar", "", "");
  o->sparse = !args.Has("--no-sparse");
  o->sparsity = static_cast<float>(args.Float("--sparsity", "", -1.0));
  if (args.Has("--sparsity") && !(o->sparsity >= 0.0f && o->sparsity < 1.0f)) {
    args.Fail("--sparsity expects a number in [0, 1)");
  }
  o->use_predictor = !args.Has("--oracle");
  o->masked_dense = args.Has("--masked-dense");
  o->trace_path = args.Str("--trace", "", "");
}

}  // namespace kx::cli
