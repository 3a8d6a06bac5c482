// kairox-prepare: builds a model's sidecar (thresholds, predictors, neuron
// groups, FFN bundles) for activation-sparse inference. One command:
//   kairox-prepare -m MODEL [-o SIDECAR] [--sparsity S] [--down-layout auto|rows|blocks]
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli_args.h"
#include "common/progress.h"
#include "prepare/prepare.h"

namespace {

void PrintUsage(std::FILE* out) {
  std::fprintf(out,
               "usage: kairox-prepare [-m MODEL] [-o SIDECAR] [options]\n"
               "Builds MODEL's sidecar for activation-sparse inference: calibration, activation\n"
               "profile, thresholds, co-activation grouping (METIS), predictors, FFN bundles.\n"
               "  -m, --model PATH        model (default: the fetched default model)\n"
               "  -o, --output PATH       sidecar (default: <model>.kairox.gguf beside it)\n"
               "  --sparsity S            target sparsity in (0,1) (default 0.15)\n"
               "  --levels a,b,...        also store thresholds for these levels\n"
               "                          (default 0.1,0.15,0.2,0.3,...,0.9)\n"
               "  --down-layout L         how ffn_down sits in the bundles: auto (default),\n"
               "                          blocks (the model's own Q4_1 down blocks, groups =\n"
               "                          those 32-neuron blocks: no re-quantization, no extra\n"
               "                          bytes), rows (down_t rows, any grouping, re-quantized\n"
               "                          to --down-type). auto = blocks where the model allows\n"
               "                          and none of --group-size/--grouping/--down-type is given\n"
               "  --group-size GS         rows: neurons per group, 4, 8, 16 or 32 (default 16)\n"
               "  --grouping M            rows: metis | frequency | random (default metis)\n"
               "  --tokens N              calibration token budget (default 4096)\n"
               "  --calib-file PATH       calibrate on this text instead of the model's own\n"
               "                          answers to built-in instructions\n"
               "  --seed N                calibration sampling seed (default 1)\n"
               "  --target-recall R       predictor recall target on held-out tokens (0.95)\n"
               "  --max-rank N            largest predictor rank (default 256)\n"
               "  --down-type T           rows: down_t type, auto (the model's type if 8-bit\n"
               "                          or float, else Q8_0), q8_0, q4_0, q4_1, q5_0, q5_1,\n"
               "                          f16, f32\n"
               "  --pin-fraction F        neurons per layer always computed: the fraction with\n"
               "                          the largest calibration peaks (default 0.01)\n"
               "  --no-predictors         thresholds only (the oracle; every neuron computed)\n"
               "  --compare-grouping      also compare METIS/frequency/random for GS 4..32\n"
               "  --report PATH           write the report as JSON\n"
               "  -t, --threads N         threads (default: all cores)\n"
               "  -h, --help              this help\n");
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-prepare: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  kx::cli::Args args(argc, argv,
                     {"-m", "--model", "-o", "--output", "--sparsity", "--levels", "--group-size",
                      "--grouping", "--tokens", "--calib-file", "--seed", "--target-recall",
                      "--max-rank", "--down-type", "--down-layout", "--report", "-t", "--threads", "--pin-fraction"},
                     {"-h", "--help", "--no-predictors", "--compare-grouping"});
  if (args.ok() && args.Has("-h", "--help")) {
    PrintUsage(stdout);
    return 0;
  }
  kx::PrepareOptions o;
  o.model_path = args.Str("-m", "--model", kx::cli::DefaultModelPath());
  o.sidecar_path = args.Str("-o", "--output", "");
  o.sparsity = static_cast<float>(args.Float("--sparsity", "", o.sparsity));
  o.sparsity_requested = args.Has("--sparsity") || args.Has("--levels");
  o.group_size = static_cast<int>(args.Int("--group-size", "", 16, 1, 32));
  o.calibration.token_budget = args.Int("--tokens", "", 4096, 64, LLONG_MAX);
  o.calibration.text_file = args.Str("--calib-file", "", "");
  o.calibration.seed = static_cast<uint64_t>(args.Int("--seed", "", 1, 0, LLONG_MAX));
  o.predictor.target_recall = args.Float("--target-recall", "", 0.95);
  o.predictor.max_rank = static_cast<int>(args.Int("--max-rank", "", 256, 1));
  o.train_predictors = !args.Has("--no-predictors");
  o.pin_fraction = args.Float("--pin-fraction", "", o.pin_fraction);
  if (!(o.pin_fraction >= 0.0 && o.pin_fraction <= 1.0)) args.Fail("--pin-fraction expects [0, 1]");
  o.compare_grouping = args.Has("--compare-grouping");
  o.n_threads = static_cast<int>(args.Int("-t", "--threads", 0, 0));
  if (args.Has("--levels")) {
    o.levels.clear();
    for (absl::string_view part : absl::StrSplit(args.Str("--levels", "", ""), ',')) {
      float v = 0;
      if (!absl::SimpleAtof(part, &v)) {
        args.Fail("--levels expects numbers separated by commas");
        break;
      }
      o.levels.push_back(v);
    }
  }
  const std::string grouping = args.Str("--grouping", "", "metis");
  if (grouping == "metis") {
    o.grouping = kx::sparse::GroupingMethod::kMetis;
  } else if (grouping == "frequency") {
    o.grouping = kx::sparse::GroupingMethod::kFrequency;
  } else if (grouping == "random") {
    o.grouping = kx::sparse::GroupingMethod::kRandom;
  } else {
    args.Fail("--grouping expects metis, frequency or random, got '" + grouping + "'");
  }
  const std::string down = args.Str("--down-type", "", "auto");
  if (down != "auto") {
    o.auto_down_type = false;
    const std::pair<const char*, kx::GgmlType> kTypes[] = {
        {"q8_0", kx::GgmlType::kQ8_0}, {"q4_0", kx::GgmlType::kQ4_0}, {"q4_1", kx::GgmlType::kQ4_1},
        {"q5_0", kx::GgmlType::kQ5_0}, {"q5_1", kx::GgmlType::kQ5_1}, {"f16", kx::GgmlType::kF16},
        {"f32", kx::GgmlType::kF32}};
    bool found = false;
    for (const auto& [name, type] : kTypes) {
      if (down == name) {
        o.down_type = type;
        found = true;
      }
    }
    if (!found) args.Fail("--down-type: unknown type '" + down + "'");
  }
  // auto: the model's own down blocks where its ffn_down allows (Q4_1), unless
  // the grouping or the down_t type was chosen, which only rows can honour.
  const std::string layout = args.Str("--down-layout", "", "auto");
  if (layout == "rows") {
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kRows;
  } else if (layout == "blocks") {
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kBlocks;
    if (args.Has("--group-size") || args.Has("--grouping") || args.Has("--down-type")) {
      args.Fail("--down-layout blocks fixes the groups (the model's 32-neuron down blocks) and "
                "the down type; drop --group-size/--grouping/--down-type or use rows");
    }
  } else if (layout == "auto") {
    if (args.Has("--group-size") || args.Has("--grouping") || args.Has("--down-type")) {
      o.down_layout = kx::PrepareOptions::DownLayoutChoice::kRows;
    }
  } else {
    args.Fail("--down-layout expects auto, rows or blocks, got '" + layout + "'");
  }
  if (!args.ok()) return Fail(args.error());

  std::unique_ptr<kx::cli::Progress> bar;
  std::string bar_stage;
  o.progress = [&](const std::string& stage, int64_t done, int64_t total) {
    if (stage != bar_stage) {
      bar = std::make_unique<kx::cli::Progress>(stage, total);
      bar_stage = stage;
    }
    bar->Update(done);
  };
  auto rep = kx::Prepare(o);
  bar.reset();
  if (!rep.ok()) return Fail(std::string(rep.status().message()));
  std::printf("%s", rep->ToTable().c_str());
  if (args.Has("--report")) {
    std::ofstream out(args.Str("--report", "", ""));
    out << rep->ToJson() << "\n";
    if (!out) return Fail("cannot write the report");
  }
  std::printf("wrote %s\n", rep->sidecar_path.c_str());
  return 0;
}
