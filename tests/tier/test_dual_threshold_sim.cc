// --dual-threshold on the sim device, end to end on a writer-made tiny model with a sidecar
// from the real prepare pipeline (engine/sparse_runtime.cc builds the masks, the split FFN's
// End gives the greedy its signal):
//   - with the thresholds held at θ (step 0) the logits stay within the bound
//     test_device_ffn uses against the CPU's sparse path, and nothing moves;
//   - with the CPU forced to be the bottleneck the device gets more neurons, the CPU fewer,
//     θ_g < θ < θ_c, the error bound holds in total, and the logits are finite; the
//     --device-log carries the thresholds.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/device_ffn.h"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "engine/tiny_sidecar.h"
#include "test_util.h"

namespace {

std::string TempDir() { return kx::test::TempDir("dual_threshold"); }

struct Prepared {
  std::string model, sidecar;
};

// 3 layers, n_embd 64, n_ff 512; a rows sidecar of 32 groups of 16 at s = 0.5 (as
// test_device_ffn's).
const Prepared& Tiny() {
  static const Prepared p = [] {
    Prepared r;
    r.model = TempDir() + "/dual.gguf";
    r.sidecar = TempDir() + "/dual.kairox.gguf";
    kx::test::TinyModelSpec s;
    s.n_layer = 3;
    s.n_embd = 64;
    s.n_ff = 512;
    s.seed = 97;
    kx::test::TinySidecarOptions o;
    o.sparsity = 0.5f;
    o.levels = {0.0f, 0.5f};
    const absl::Status st = kx::test::WriteTinyModelWithSidecar(s, r.model, r.sidecar, o);
    INFO(st.message());
    REQUIRE(st.ok());
    return r;
  }();
  return p;
}

// Threshold 0 (level 0): every predicted neuron is kept, so with equal masks the two paths
// differ only in arithmetic (test_device_ffn's reasoning).
kx::EngineOptions Options(const std::string& device) {
  kx::EngineOptions o;
  o.n_threads = 2;
  o.n_ctx = 128;
  o.sidecar = Tiny().sidecar;
  o.device = device;
  o.sparsity = 0.0f;
  if (device == "sim") {
    o.n_gpu_layers = 0;
    o.vram_ffn = "50%";
    o.device_policy = "static";  // residency fixed: the masks' split is the placement's
  }
  return o;
}

const std::vector<int32_t>& Sequence() {
  static const std::vector<int32_t> t = kx::test::RandomTokens(7, 32);
  return t;
}

double MaxAbs(const std::vector<std::vector<float>>& rows) {
  double m = 0;
  for (const auto& r : rows) {
    for (float v : r) m = std::max(m, static_cast<double>(std::fabs(v)));
  }
  return m;
}

}  // namespace

TEST_CASE("dual thresholds on sim: held at θ, the split FFN's logits", "[dual_threshold]") {
  auto cpu = kx::test::LoadEngine(Tiny().model, Options("cpu"));
  const auto ref = kx::test::TeacherForced(*cpu, {}, Sequence());
  REQUIRE(kx::test::AllFinite(ref));
  kx::EngineOptions o = Options("sim");
  o.dual_threshold = true;
  o.dual_step_logit = 0.0f;
  auto e = kx::test::LoadEngine(Tiny().model, o);
  REQUIRE(e->device_ffn() != nullptr);
  REQUIRE(e->sparse()->dual() != nullptr);
  const auto got = kx::test::TeacherForced(*e, {}, Sequence());
  CHECK(kx::test::AllFinite(got));
  // test_device_ffn's bound: 1e-3 of the largest logit (float vs 16-bit coefficients).
  const double bound = 1e-3 * MaxAbs(ref) + 1e-4, diff = kx::test::MaxAbsDiff(got, ref);
  INFO("max |Δlogit| " << diff << ", bound " << bound);
  CHECK(diff <= bound);
  const kx::sparse::DualThresholdStats& st = e->sparse()->dual()->stats();
  CHECK(st.steps == 3 * static_cast<int64_t>(Sequence().size()));
  CHECK(st.gained == 0);
  CHECK(st.dropped == 0);
  CHECK(st.theta_g_sum == st.theta_sum);
  CHECK(st.theta_c_sum == st.theta_sum);
}

TEST_CASE("dual thresholds on sim: the CPU as the bottleneck moves work to the device",
          "[dual_threshold]") {
  const std::string log = TempDir() + "/dual_device_log.csv";
  kx::EngineOptions single = Options("sim");
  auto base = kx::test::LoadEngine(Tiny().model, single);
  const auto ref = kx::test::TeacherForced(*base, {}, Sequence());
  const kx::DeviceFfnStats base_st = base->device_ffn()->stats();

  kx::EngineOptions o = single;
  o.dual_threshold = true;
  o.dual_device_wait_share = 1e12;  // every step reads as "the CPU finished last"
  o.device_log = log;
  auto e = kx::test::LoadEngine(Tiny().model, o);
  const auto got = kx::test::TeacherForced(*e, {}, Sequence());
  CHECK(kx::test::AllFinite(got));
  INFO("max |Δlogit| against the single threshold " << kx::test::MaxAbsDiff(got, ref));
  const kx::sparse::DualThresholdStats st = e->sparse()->dual()->stats();
  const kx::DeviceFfnStats ds = e->device_ffn()->stats();
  INFO("gained " << st.gained << ", dropped " << st.dropped << ", clamped " << st.clamped << " of "
                 << st.steps << "; device neurons " << ds.neurons_on_device << " vs "
                 << base_st.neurons_on_device << ", CPU neurons "
                 << ds.neurons_needed - ds.neurons_on_device << " vs "
                 << base_st.neurons_needed - base_st.neurons_on_device);
  CHECK(st.steps == 3 * static_cast<int64_t>(Sequence().size()));
  CHECK(st.gained > 0);
  CHECK(st.dropped > 0);
  CHECK(st.loss_mass <= st.gain_mass);  // the bound per step, summed
  CHECK(st.theta_g_sum < st.theta_sum);
  CHECK(st.theta_c_sum > st.theta_sum);
  CHECK(ds.neurons_on_device > base_st.neurons_on_device);
  CHECK(ds.neurons_needed - ds.neurons_on_device <
        base_st.neurons_needed - base_st.neurons_on_device);

  e.reset();  // closes the log
  std::ifstream in(log);
  std::string header, line;
  REQUIRE(std::getline(in, header));
  CHECK_THAT(header, Catch::EndsWith(",theta_g,theta_c,gained,dropped,clamped"));
  int64_t lines = 0, apart = 0;
  while (std::getline(in, line)) {
    // theta_g and theta_c are the fifth and fourth fields from the end.
    size_t at = line.size();
    for (int i = 0; i < 5; ++i) at = line.rfind(',', at - 1);
    const double theta_g = std::stod(line.substr(at + 1));
    const double theta_c = std::stod(line.substr(line.find(',', at + 1) + 1));
    INFO(line);
    CHECK(theta_g <= theta_c);
    apart += theta_g < theta_c;
    ++lines;
  }
  CHECK(lines == st.steps);
  CHECK(apart > 0);
}
