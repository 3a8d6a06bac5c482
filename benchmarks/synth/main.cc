// kairox-synth: writes a llama-family GGUF at the shape of a real 1B-13B model
// with a ReLU-family (or SwiGLU) FFN whose activation statistics are chosen:
// natural sparsity per layer, a hot set, reuse between tokens (issue #17).
// With --measure it reads an activity trace instead and prints the realised
// statistics (and checks them against the model's request with --check).
//   kairox-synth --shape 7b --type q4_0 --act relu -o /work/synth-data/7b.gguf
//   kairox-synth --measure T.kxtr --first-step 8 [--check MODEL.gguf]
// How the statistics are realised and measured: docs/scale.md.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli_app.h"
#include "model/gguf.h"
#include "synth/synth_model.h"
#include "synth/synth_stats.h"

namespace {

constexpr const char* kDescription =
    "kairox-synth: a llama-family GGUF at a real model's shape whose FFN activations have the\n"
    "asked-for sparsity, hot set and reuse (a speed/I-O test bed: the weights mean nothing), or\n"
    "with --measure the realised statistics of an activity trace. docs/scale.md.";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kairox-synth: error: %s\n", msg.c_str());
  return 1;
}

void Progress(int done, int total) {
  std::fprintf(stderr, "\rkairox-synth: %d/%d tensors", done, total);
  if (done == total) std::fprintf(stderr, "\n");
}

// The request a model was made with, from its kairox.synth.* keys.
absl::Status ReadRequest(const std::string& path, kx::synth::SynthSpec* spec,
                         kx::synth::SynthDerived* derived) {
  KX_ASSIGN_OR_RETURN(kx::GgufFile f, kx::GgufFile::Open(path));
  if (!f.HasKey("kairox.synth.sparsity")) {
    return absl::InvalidArgumentError(path + " was not written by kairox-synth");
  }
  KX_ASSIGN_OR_RETURN(kx::GgufArray sp, f.GetArray("kairox.synth.sparsity"));
  derived->density.clear();
  for (uint64_t i = 0; i < sp.size(); ++i) {
    KX_ASSIGN_OR_RETURN(double s, sp.FloatAt(i));
    derived->density.push_back(1.0 - s);
  }
  KX_ASSIGN_OR_RETURN(double hf, f.GetFloat("kairox.synth.hot_fraction"));
  KX_ASSIGN_OR_RETURN(double hs, f.GetFloat("kairox.synth.hot_share"));
  KX_ASSIGN_OR_RETURN(double reuse, f.GetFloat("kairox.synth.reuse"));
  spec->hot_fraction = hf;
  spec->hot_share = hs;
  spec->reuse = reuse;
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "kairox-synth");
  kx::cli::SetUp(app);
  kx::synth::SynthSpec spec;
  std::string shape = "7b", type = "q4_0", output_type = "q8_0", out, sparsity = "0.9";
  std::string measure, check_model;
  int64_t first_step = 0;
  app.add_option("--shape", shape, "the real model whose shape to take")
      ->check(kx::cli::OneOf(kx::synth::ShapeNames()))
      ->type_name("tiny|1b|3b|7b|7b-mistral|13b");
  kx::cli::AddInt(app, "--layers", &spec.n_layer_override, 0, 4096,
                  "write only this many layers of the shape (0: all)");
  app.add_option("--type", type, "attention and FFN matrices, token embedding")
      ->check(kx::cli::OneOf({"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16"}))
      ->type_name("q4_0|q8_0|...");
  app.add_option("--output-type", output_type, "the LM head")
      ->check(kx::cli::OneOf({"q4_0", "q8_0", "f16"}))
      ->type_name("q4_0|q8_0|f16");
  app.add_option("--act", spec.act, "FFN activation (llama.feed_forward_activation)")
      ->check(kx::cli::OneOf({"relu", "fatrelu", "drelu", "silu"}))
      ->type_name("relu|fatrelu|drelu|silu");
  kx::cli::AddNumber(app, "--fatrelu-threshold", &spec.fatrelu_threshold, "FATReLU's t");
  app.add_option("--sparsity", sparsity,
                 "fraction of inactive FFN neurons per layer: one value, or several interpolated "
                 "from the first layer to the last")
      ->type_name("S[,S...]");
  kx::cli::AddNumber(app, "--hot-fraction", &spec.hot_fraction, "share of neurons that are hot");
  kx::cli::AddNumber(app, "--hot-share", &spec.hot_share, "share of activations the hot take");
  kx::cli::AddNumber(app, "--reuse", &spec.reuse,
                     "P(active at t+1 | active at t), over neurons and layers");
  kx::cli::AddInt(app, "--topics", &spec.topics, 2, 1 << 20, "hidden topics (active-set kinds)");
  kx::cli::AddNumber(app, "--residual-mix", &spec.residual_mix,
                     "norm of each block's output next to the embedding's");
  kx::cli::AddInt(app, "-s,--seed", &spec.seed, 0, INT64_MAX, "seed");
  kx::cli::AddInt(app, "-t,--threads", &spec.n_threads, 1, kx::cli::kMaxThreads, "threads");
  app.add_option("-o,--output", out, "the GGUF to write")->type_name("PATH");
  app.add_option("--measure", measure, "print the realised statistics of this trace instead")
      ->type_name("TRACE");
  kx::cli::AddInt(app, "--first-step", &first_step, 0, UINT32_MAX,
                  "--measure from this step (skip the prompt)");
  app.add_option("--check", check_model,
                 "with --measure: compare with the request this kairox-synth model was made with")
      ->type_name("MODEL");
  if (const int rc = kx::cli::Parse(app, argc, argv); rc >= 0) return rc;

  if (!measure.empty()) {
    auto got = kx::synth::MeasureTrace(measure, spec.hot_fraction, first_step);
    if (!got.ok()) return Fail(std::string(got.status().message()));
    std::printf("%s", kx::synth::FormatRealised(*got).c_str());
    if (check_model.empty()) return 0;
    kx::synth::SynthDerived want;
    if (auto st = ReadRequest(check_model, &spec, &want); !st.ok()) {
      return Fail(std::string(st.message()));
    }
    const absl::Status st = kx::synth::CheckRealised(*got, spec, want, {});
    std::printf("check against %s: %s\n", check_model.c_str(),
                st.ok() ? "within tolerance" : std::string(st.message()).c_str());
    return st.ok() ? 0 : 2;
  }
  if (out.empty()) return Fail("-o/--output: required (or --measure TRACE)");
  auto sh = kx::synth::ShapeByName(shape);
  if (!sh.ok()) return Fail(std::string(sh.status().message()));
  spec.shape = *sh;
  spec.sparsity.clear();
  for (absl::string_view part : absl::StrSplit(sparsity, ',')) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v)) return Fail("--sparsity: '" + sparsity + "' is not numbers");
    spec.sparsity.push_back(v);
  }
  auto parse_type = [](const std::string& t) {
    return t == "q4_0"   ? kx::GgmlType::kQ4_0
           : t == "q4_1" ? kx::GgmlType::kQ4_1
           : t == "q5_0" ? kx::GgmlType::kQ5_0
           : t == "q5_1" ? kx::GgmlType::kQ5_1
           : t == "q8_0" ? kx::GgmlType::kQ8_0
                         : kx::GgmlType::kF16;
  };
  spec.weight_type = parse_type(type);
  spec.output_type = parse_type(output_type);
  auto derived = kx::synth::Derive(spec);
  if (!derived.ok()) return Fail(std::string(derived.status().message()));
  std::fprintf(stderr,
               "kairox-synth: %s (%s), %d layers, %s/%s, act %s: %.2f GB; p_hot %.4f p_cold %.4f, "
               "chance reuse %.4f, topic stay %.4f\n",
               spec.shape.name.c_str(), spec.shape.follows.c_str(),
               spec.n_layer_override > 0 ? spec.n_layer_override : spec.shape.n_layer, type.c_str(),
               output_type.c_str(), spec.act.c_str(), derived->file_bytes / 1e9, derived->p_hot,
               derived->p_cold, derived->chance_reuse, derived->topic_stay);
  auto written = kx::synth::WriteSynthModel(out, spec, &Progress);
  if (!written.ok()) return Fail(std::string(written.status().message()));
  std::printf("%s\n", out.c_str());
  return 0;
}
