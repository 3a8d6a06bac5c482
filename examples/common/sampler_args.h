// The sampling flags every generating program takes, in one place: --seed, --temp, --top-k,
// --top-p, --min-p, --repeat-penalty, --repeat-last-n, bound to the fields of the same names in
// kx::SamplerOptions (kairox-cli) or kairox::SamplerParams (kairox-chat, kairox-server, over the
// C ABI). The programs differ only in the group's title and in what the seed means to them.
// Header-only, for the programs.
#pragma once

#include <cstdint>
#include <string>

#include "common/cli_app.h"

namespace kx::cli {

// Declares the sampling flags on `app` in the group `group`, bound to *sp and *seed (whose
// current values are the defaults --help shows). `seed_help` says what -1 means to the program.
template <typename SamplerParams>
void AddSamplerOptions(CLI::App& app, SamplerParams* sp, int64_t* seed, const std::string& group,
                       const std::string& seed_help) {
  AddInt(app, "-s,--seed", seed, -1, INT64_MAX, seed_help)->group(group);
  AddNumber(app, "--temp", &sp->temperature, "temperature (0: greedy)")->group(group);
  AddInt(app, "--top-k", &sp->top_k, -1, INT32_MAX, "top-k (0: off)")->group(group);
  AddNumber(app, "--top-p", &sp->top_p, "top-p (1: off)")->group(group);
  AddNumber(app, "--min-p", &sp->min_p, "min-p (0: off)")->group(group);
  AddNumber(app, "--repeat-penalty", &sp->repeat_penalty, "repetition penalty (1: off)")
      ->group(group);
  AddInt(app, "--repeat-last-n", &sp->repeat_last_n, -1, INT32_MAX,
         "tokens the penalty looks back over (-1: all)")
      ->group(group);
}

}  // namespace kx::cli
