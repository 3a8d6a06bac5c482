// The activation-sparsity, memory-tier and device flags every program takes, in one place.
// AddSparseOptions declares them on a CLI::App (common/cli_app.h), bound to the fields of the same
// names in kx::EngineOptions (kairox-cli, -perplexity) or kairox::SessionParams (kairox-chat, over
// the C ABI, which has the first set of flags below but not --oracle .. --tier-miss and
// --device-profile):
//   --sidecar PATH   the sidecar (default: <model>.kairox.gguf beside the model, if present)
//   --no-sparse      run dense even when a sidecar exists
//   --sparsity S     one of the sidecar's calibrated levels (default: its own)
//   --oracle         threshold only, no predictor (every neuron computed; quality bound)
//   --masked-dense   decode with dense kernels and masks (reference for the sparse kernels)
//   --trace PATH     record predicted and actual active neurons per token and layer
//   --ram-budget SIZE|PCT  hard RAM limit; FFN bundles streamed from the sidecar file
//   --policy NAME    which groups stay resident under the budget
//   --no-prefetch    a layer's bundle reads start when it runs, not one layer ahead
//   --tier-log PATH  CSV per layer step of the tier's λ, hits, reads and stalls, with the
//                    decode graph's per-token stalls (docs/tiers.md)
//   --tier-miss read|skip  a predicted group that is not resident: read it, or skip it
// and the device flags (docs/device.md):
//   --device cpu|cuda|sim|auto   where the non-FFN part of the layers runs (default auto)
//   --vram-budget SIZE|PCT       the device memory kairox may use (default: all of it)
//   -ngl N, --gpu-layers N, --n-gpu-layers N   at most N layers on the device (llama.cpp's meaning)
//   --device-profile NAME        the sim device's hardware profile
//   --vram-ffn SIZE|PCT          the split FFN's device slots
//   --device-policy NAME         which FFN groups hold device slots
//   --device-log PATH            CSV per layer step of the split FFN and its stall tags (not in
//                                kairox-chat)
//   --dual-threshold             the split FFN's load-aware dual thresholds θ_g / θ_c (not in
//                                kairox-chat)
// Header-only, for the programs.
#pragma once

#include <string>

#include "common/cli_app.h"

namespace kx::cli {

// Declares the sparsity, memory-tier and device flags on `app`, bound to *o (whose current
// values are the defaults --help shows). The flags for fields `Options` lacks are not declared.
template <typename Options>
void AddSparseOptions(CLI::App& app, Options* o) {
  const std::string sparsity = "activation sparsity (a sidecar from kairox-prepare)";
  app.add_option("--sidecar", o->sidecar,
                 "sidecar (default: <model>.kairox.gguf beside the model, if present)")
      // An empty path would silently mean the default (or dense): refused instead.
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return text.empty() ? "expects a sidecar path, got an empty string" : "";
          },
          ""))
      ->type_name("PATH")
      ->group(sparsity);
  app.add_flag_callback(
         "--no-sparse", [o] { o->sparse = false; }, "run dense even when a sidecar exists")
      ->group(sparsity);
  app.add_option("--sparsity", o->sparsity,
                 "one of the sidecar's calibrated levels, in [0, 1) (default: its own)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0' || !(v >= 0.0 && v < 1.0)) {
              return "expects a number in [0, 1), got '" + text + "'";
            }
            return {};
          },
          ""))
      ->type_name("S")
      ->default_str("the sidecar's")
      ->group(sparsity);
  constexpr bool kEngine = requires { o->use_predictor; };  // the engine's own options
  if constexpr (kEngine) {
    app.add_flag_callback(
           "--oracle", [o] { o->use_predictor = false; },
           "threshold only, no predictor (computes every neuron)")
        ->group(sparsity);
    app.add_flag("--masked-dense", o->masked_dense,
                 "dense kernels with masks (reference for the sparse kernels)")
        ->group(sparsity);
    app.add_option("--trace", o->trace_path,
                   "record predicted and actual active neurons per token and layer")
        ->type_name("PATH")
        ->group(sparsity);
  }

  const std::string tiers = "memory tiers (docs/tiers.md)";
  app.add_option("--ram-budget", o->ram_budget,
                 "hard limit on the RAM the session owns (512M, 2G), or resident bundles as a "
                 "share of the sidecar's (50%); bundles are read from the sidecar with O_DIRECT "
                 "into the engine's own slots (default: no limit)")
      ->type_name("SIZE|PCT")
      ->group(tiers);
  app.add_option("--policy", o->policy,
                 "resident groups under a budget: static, lru, lfu, topk, tam, tam-t, "
                 "tam-adaptive, tam-t-adaptive")
      ->type_name("NAME")
      ->group(tiers);
  app.add_flag_callback(
         "--no-prefetch", [o] { o->prefetch = false; },
         "read a layer's bundles when it runs, not one layer ahead")
      ->group(tiers);
  if constexpr (kEngine) {
    app.add_option("--tier-log", o->tier_log,
                   "CSV per layer step: lambda, resident, hits, reads, bytes, stalls; the "
                   "decode graph's per-token stalls (cpu, gpu, h2d, disk) on each token's last "
                   "line (docs/tiers.md)")
        ->type_name("PATH")
        ->group(tiers);
    app.add_option_function<std::string>(
           "--tier-miss", [o](const std::string& v) { o->tier_skip_misses = v == "skip"; },
           "a predicted group not resident: read it (exact) or compute without it")
        ->check(OneOf({"read", "skip"}))
        ->type_name("read|skip")
        ->default_str("read")
        ->group(tiers);
  }

  const std::string device = "device (docs/device.md)";
  app.add_option("--device", o->device,
                 "cpu, cuda, sim (a simulated GPU, for testing) or auto (cuda when a usable GPU "
                 "is found, else cpu)")
      ->check(OneOf({"auto", "cpu", "cuda", "sim"}))
      ->type_name("auto|cpu|cuda|sim")
      ->group(device);
  app.add_option("--vram-budget", o->vram_budget,
                 "device memory to use (4G, 50%; default: all of it)")
      ->type_name("SIZE|PCT")
      ->group(device);
  // -ngl is rewritten to --n-gpu-layers by NormalizeArgs (CLI11 takes one letter after a dash).
  AddInt(app, "--n-gpu-layers,--gpu-layers", &o->n_gpu_layers, -1, kMaxCount,
         "(also -ngl) at most N layers' attention on the device (-1: all that fit)")
      ->group(device);
  app.add_option("--vram-ffn", o->vram_ffn,
                 "the split FFN: device slots for FFN bundles, a size (2G) or a share of the "
                 "sidecar's bundles (30%); the device computes the predicted groups it holds, "
                 "the CPU the rest; 0: the FFN stays on the CPU (default: the VRAM the "
                 "attention layers and the head leave)")
      ->type_name("SIZE|PCT")
      ->group(device);
  app.add_option("--device-policy", o->device_policy,
                 "which FFN groups hold device slots: static, lru, lfu, topk, tam, tam-t, "
                 "tam-adaptive, tam-t-adaptive")
      ->type_name("NAME")
      ->group(device);
  if constexpr (kEngine) {
    app.add_option("--device-log", o->device_log,
                   "CSV per layer step of the split FFN: lambda, resident, needed, on device, "
                   "loads, evictions, bytes, device wait, CPU time, then the stall tags (gpu, "
                   "h2d critical/background, disk, other) and the device-timed parts")
        ->type_name("PATH")
        ->group(device);
    app.add_flag("--dual-threshold", o->dual_threshold,
                 "the split FFN's masks with two predictor thresholds: lower on the groups the "
                 "device holds, higher on the CPU's, moved by which side finished last, the "
                 "expected missed activations never above the single threshold's (DynamicInfer)")
        ->group(device);
    app.add_option("--device-profile", o->device_profile,
                   "the sim device's profile (rtx4090-pcie4, h100-pcie5, ...)")
        ->type_name("NAME")
        ->group(device);
  }
}

}  // namespace kx::cli
