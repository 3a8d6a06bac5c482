// kairox-prepare: builds a model's sidecar (thresholds, predictors, neuron
// groups, FFN bundles) for activation-sparse inference. One command:
//   kairox-prepare -m MODEL [-o SIDECAR] [--sparsity S] [--down-layout auto|rows|blocks]
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "common/cli_app.h"
#include "common/progress.h"
#include "prepare/prepare.h"

namespace {

constexpr const char* kDescription =
    "kairox-prepare: builds MODEL's sidecar for activation-sparse inference: calibration,\n"
    "activation profile, thresholds, co-activation grouping (METIS), predictors, FFN bundles.\n"
    "Progress: a bar on a terminal, else one line per stage on stderr.";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-prepare: error: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "kairox-prepare");
  kx::cli::SetUp(app);
  kx::PrepareOptions o;
  o.model_path = kx::cli::DefaultModelPath();
  std::string grouping = "metis", down = "auto", layout = "auto", report_path;
  bool no_predictors = false, version = false;
  app.add_option("-m,--model", o.model_path,
                 "model (default: $KAIROX_MODEL, else the fetched "
                 "default model)")
      ->type_name("PATH");
  app.add_option("-o,--output", o.sidecar_path, "sidecar (default: <model>.kairox.gguf beside it)")
      ->type_name("PATH");
  app.add_option("--sparsity", o.sparsity, "target sparsity in (0, 1)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0' || !(v > 0.0 && v < 1.0)) {
              return "expects a number in (0, 1), got '" + text + "'";
            }
            return {};
          },
          ""))
      ->type_name("S");
  app.add_option("--levels", o.levels, "also store thresholds for these levels")
      ->delimiter(',')
      ->check(kx::cli::Number())
      ->default_str("0.1,0.15,0.2,0.3,...,0.9")
      ->type_name("a,b,...");
  app.add_option("--down-layout", layout,
                 "how ffn_down sits in the bundles: blocks (the model's own Q4_1 down blocks, "
                 "groups = those 32-neuron blocks: no re-quantization, no extra bytes), rows "
                 "(down_t rows, any grouping, re-quantized to --down-type); auto = blocks where "
                 "the model allows and none of --group-size/--grouping/--down-type is given")
      ->check(kx::cli::OneOf({"auto", "rows", "blocks"}))
      ->type_name("auto|rows|blocks");
  kx::cli::AddInt(app, "--group-size", &o.group_size, 1, 32, "rows: neurons per group");
  app.add_option("--grouping", grouping, "rows: how neurons are grouped")
      ->check(kx::cli::OneOf({"metis", "frequency", "random"}))
      ->type_name("metis|frequency|random");
  kx::cli::AddInt(app, "--tokens", &o.calibration.token_budget, 64, kx::cli::kMaxCount,
                  "calibration token budget");
  app.add_option("--calib-file", o.calibration.text_file,
                 "calibrate on this text instead of the model's own answers to built-in "
                 "instructions")
      ->type_name("PATH");
  kx::cli::AddInt(app, "--seed", &o.calibration.seed, 0, INT64_MAX, "calibration sampling seed");
  kx::cli::AddNumber(app, "--target-recall", &o.predictor.target_recall,
                     "predictor recall target on held-out tokens");
  kx::cli::AddInt(app, "--max-rank", &o.predictor.max_rank, 1, kx::cli::kMaxCount,
                  "largest predictor rank");
  app.add_option("--down-type", down,
                 "rows: down_t type; auto = the model's type if 8-bit or float, else q8_0")
      ->check(kx::cli::OneOf({"auto", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "f16", "f32"}))
      ->type_name("T");
  app.add_option("--pin-fraction", o.pin_fraction,
                 "neurons per layer always computed: the fraction with the largest calibration "
                 "peaks, in [0, 1]")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0' || !(v >= 0.0 && v <= 1.0)) {
              return "expects a number in [0, 1], got '" + text + "'";
            }
            return {};
          },
          ""))
      ->type_name("F");
  app.add_flag("--no-predictors", no_predictors,
               "thresholds only (the oracle; every neuron computed)");
  app.add_flag("--compare-grouping", o.compare_grouping,
               "also compare METIS/frequency/random for group sizes 4..32");
  app.add_option("--report", report_path, "write the report as JSON")->type_name("PATH");
  kx::cli::AddInt(app, "-t,--threads", &o.n_threads, 0, kx::cli::kMaxThreads,
                  "threads (0: all cores)");
  app.add_flag("--version", version, "print the version and exit");
  if (const int rc = kx::cli::Parse(app, argc, argv); rc != kx::cli::kContinue) return rc;
  if (version) {
    std::printf("kairox-prepare %s\n", KX_VERSION_STRING);
    return 0;
  }
  if (!(o.predictor.target_recall > 0.0 && o.predictor.target_recall <= 1.0)) {
    return Fail("--target-recall expects a number in (0, 1], got " +
                std::to_string(o.predictor.target_recall));
  }
  o.sparsity_requested = app.count("--sparsity") > 0 || app.count("--levels") > 0;
  o.train_predictors = !no_predictors;
  if (grouping == "frequency") {
    o.grouping = kx::sparse::GroupingMethod::kFrequency;
  } else if (grouping == "random") {
    o.grouping = kx::sparse::GroupingMethod::kRandom;
  }
  if (down != "auto") {
    o.auto_down_type = false;
    const std::pair<const char*, kx::GgmlType> kTypes[] = {
        {"q8_0", kx::GgmlType::kQ8_0}, {"q4_0", kx::GgmlType::kQ4_0}, {"q4_1", kx::GgmlType::kQ4_1},
        {"q5_0", kx::GgmlType::kQ5_0}, {"q5_1", kx::GgmlType::kQ5_1}, {"f16", kx::GgmlType::kF16},
        {"f32", kx::GgmlType::kF32}};
    for (const auto& [name, type] : kTypes) {
      if (down == name) o.down_type = type;
    }
  }
  // auto: the model's own down blocks where its ffn_down allows (Q4_1), unless
  // the grouping or the down_t type was chosen, which only rows can honour.
  const bool rows_only =
      app.count("--group-size") > 0 || app.count("--grouping") > 0 || app.count("--down-type") > 0;
  if (layout == "rows") {
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kRows;
  } else if (layout == "blocks") {
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kBlocks;
    if (rows_only) {
      return Fail(
          "--down-layout blocks fixes the groups (the model's 32-neuron down blocks) and "
          "the down type; drop --group-size/--grouping/--down-type or use rows");
    }
  } else if (rows_only) {
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kRows;
  }

  // A bar on a terminal; one line per stage otherwise (a log shows where the ~25 s go).
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::unique_ptr<kx::cli::Progress> bar;
  kx::cli::StageLines lines("kairox-prepare");
  std::string bar_stage;
  o.progress = [&](const std::string& stage, int64_t done, int64_t total) {
    if (!tty) {
      lines.Update(stage);
      return;
    }
    if (stage != bar_stage) {
      bar = std::make_unique<kx::cli::Progress>(stage, total);
      bar_stage = stage;
    }
    bar->Update(done);
  };
  auto rep = kx::Prepare(o);
  bar.reset();
  lines.Finish();
  if (!rep.ok()) return Fail(std::string(rep.status().message()));
  std::printf("%s", rep->ToTable().c_str());
  if (!report_path.empty()) {
    errno = 0;
    std::ofstream out(report_path);
    out << rep->ToJson() << "\n";
    out.flush();
    if (!out) {
      return Fail("cannot write the report '" + report_path +
                  "': " + std::strerror(errno != 0 ? errno : EIO));
    }
  }
  std::printf("wrote %s\n", rep->sidecar_path.c_str());
  return 0;
}
