// FFN bundles under a RAM budget (engine/bundle_tier.h), end to end on a
// writer-made tiny model with a sidecar from the real prepare pipeline:
//   - at budgets of 100/50/25/10 % of the bundle bytes and with every policy,
//     teacher-forced logits are bit-identical to the all-in-RAM sparse path
//     (the tier changes where bundles come from, not what is computed);
//   - the negative control (compute without waiting for reads) breaks that;
//   - budgets are hard limits: what the session holds stays under them, and
//     a budget too small gets an error naming the minimum.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/memory_budget.h"
#include "catch2/catch.hpp"
#include "engine/engine.h"
#include "engine/sparse_runtime.h"
#include "engine/teacher_forced.h"
#include "engine/tiny_model.h"
#include "prepare/prepare.h"
#include "sparse/trace.h"
#include "kairox/kairox.h"
#include "test_util.h"

namespace {

std::string TempDir() { return kx::test::TempDir("tier"); }

struct Prepared {
  std::string model, sidecar;
  std::string blocks_sidecar;  // the same model's down-blocks sidecar (16 groups of 32)
};

// Built once: 3 layers, n_ff 512 in 32 groups of 16 (down_t rows), s = 0.5;
// and a down-blocks sidecar of the same model.
const Prepared& Tiny() {
  static const Prepared p = [] {
    Prepared r;
    r.model = TempDir() + "/tier.gguf";
    r.sidecar = TempDir() + "/tier.kairox.gguf";
    r.blocks_sidecar = TempDir() + "/tier-blocks.kairox.gguf";
    kx::test::TinyModelSpec s;
    s.n_layer = 3;
    s.n_embd = 64;
    s.n_ff = 512;
    s.seed = 91;
    auto st = kx::test::WriteTinyModel(r.model, s, nullptr);
    INFO(st.message());
    REQUIRE(st.ok());
    kx::PrepareOptions o;
    o.model_path = r.model;
    o.sidecar_path = r.sidecar;
    o.sparsity = 0.5f;
    o.levels = {0.0f, 0.5f, 0.8f};
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kRows;
    o.group_size = 16;
    o.n_threads = 2;
    o.calibration.token_budget = 1200;
    o.calibration.max_new_tokens = 48;
    o.predictor.ranks = {16};
    o.predictor.max_rank = 16;
    o.predictor.train.epochs = 3;
    auto rep = kx::Prepare(o);
    INFO(rep.status().message());
    REQUIRE(rep.ok());
    o.sidecar_path = r.blocks_sidecar;
    o.down_layout = kx::PrepareOptions::DownLayoutChoice::kBlocks;
    auto blocks = kx::Prepare(o);
    INFO(blocks.status().message());
    REQUIRE(blocks.ok());
    REQUIRE(blocks->down_layout == "blocks");
    return r;
  }();
  return p;
}

absl::StatusOr<std::unique_ptr<kx::Engine>> Load(kx::EngineOptions o) {
  o.n_threads = 2;
  o.n_ctx = 128;
  if (o.sidecar.empty()) o.sidecar = Tiny().sidecar;
  return kx::Engine::Load(Tiny().model, o);
}

// Teacher-forced, one token per Eval (the tier evaluates prompts token by
// token, so the reference does too): the logits of every token.
std::vector<std::vector<float>> Run(kx::Engine& e, const std::vector<int32_t>& tokens) {
  return kx::test::TeacherForced(e, {}, tokens);
}

using kx::test::MaxAbsDiff;

const std::vector<int32_t>& Sequence() {
  static const std::vector<int32_t> t = kx::test::RandomTokens(5, 40);
  return t;
}

const std::vector<std::vector<float>>& Reference() {
  static const std::vector<std::vector<float>> ref = [] {
    auto e = Load({});
    REQUIRE(e.ok());
    REQUIRE((*e)->sparse() != nullptr);
    REQUIRE((*e)->sparse()->tier() == nullptr);
    return Run(**e, Sequence());
  }();
  return ref;
}

}  // namespace

TEST_CASE("the tier computes exactly what the all-in-RAM sparse path computes") {
  const auto& ref = Reference();
  for (const char* budget : {"100%", "50%", "25%", "10%"}) {
    for (const char* policy : {"static", "lru", "lfu", "tam", "tam-t", "tam-adaptive",
                               "tam-t-adaptive"}) {
      for (bool prefetch : {true, false}) {
        DYNAMIC_SECTION(budget << " " << policy << (prefetch ? "" : " no-prefetch")) {
          kx::EngineOptions o;
          o.ram_budget = budget;
          o.policy = policy;
          o.prefetch = prefetch;
          auto e = Load(o);
          INFO(e.status().message());
          REQUIRE(e.ok());
          kx::BundleTier* tier = (*e)->sparse()->tier();
          REQUIRE(tier != nullptr);
          const auto got = Run(**e, Sequence());
          CHECK(MaxAbsDiff(got, ref) == 0.0);
          const kx::TierStats& st = tier->stats();
          CHECK(st.layer_steps == 3 * static_cast<int64_t>(Sequence().size()));
          CHECK(st.groups_needed > 0);
          CHECK(st.hits <= st.groups_needed);
          if (std::string(budget) == "100%") {
            CHECK(tier->slots_per_layer() == 32);
          } else {
            CHECK(tier->slots_per_layer() < 32);
            CHECK(st.bytes_read > 0);  // something came from the file
          }
          CHECK((*e)->ram_budget().used() <= (*e)->ram_budget().limit());
          CHECK((*e)->ram_budget().held("resident bundles") ==
                static_cast<uint64_t>(tier->slots_per_layer()) * 3 *
                    kx::BundleTier::SlotBytes((*e)->sparse()->sidecar()));
          tier->residency().CheckInvariants();
        }
      }
    }
  }
}

// The negative control is a deliberate data race (compute reads bytes a read
// is still writing), which ThreadSanitizer rightly reports: it is compiled
// only outside TSan builds (the release and ASan runs execute it).
#if !defined(__SANITIZE_THREAD__)
TEST_CASE("the tier over down-blocks bundles computes what the all-in-RAM path computes") {
  kx::EngineOptions ram;
  ram.sidecar = Tiny().blocks_sidecar;
  auto e = Load(ram);
  INFO(e.status().message());
  REQUIRE(e.ok());
  REQUIRE((*e)->sparse()->sidecar().down_layout() == kx::sparse::DownLayout::kBlocks);
  const auto ref = Run(**e, Sequence());
  // Not the rows sidecar's model: the down projection is the model's own.
  CHECK(MaxAbsDiff(ref, Reference()) > 0.0);
  for (const char* budget : {"100%", "50%", "10%"}) {
    for (const char* policy : {"static", "lru", "tam-adaptive"}) {
      DYNAMIC_SECTION(budget << " " << policy) {
        kx::EngineOptions o = ram;
        o.ram_budget = budget;
        o.policy = policy;
        auto t = Load(o);
        INFO(t.status().message());
        REQUIRE(t.ok());
        kx::BundleTier* tier = (*t)->sparse()->tier();
        REQUIRE(tier != nullptr);
        CHECK(MaxAbsDiff(Run(**t, Sequence()), ref) == 0.0);
        if (std::string(budget) == "100%") {
          CHECK(tier->slots_per_layer() == 16);
        } else {
          CHECK(tier->slots_per_layer() < 16);
          CHECK(tier->stats().bytes_read > 0);
        }
        CHECK((*t)->ram_budget().used() <= (*t)->ram_budget().limit());
      }
    }
  }
}

TEST_CASE("negative control: computing without waiting for reads changes the logits") {
  const auto& ref = Reference();
  kx::EngineOptions o;
  o.ram_budget = "10%";
  o.policy = "lru";
  o.prefetch = false;  // reads start when the layer runs: compute outruns them
  o.debug_skip_io_wait = true;
  auto e = Load(o);
  REQUIRE(e.ok());
  const auto got = Run(**e, Sequence());
  CHECK(MaxAbsDiff(got, ref) > 0.0);
}
#endif  // !__SANITIZE_THREAD__

TEST_CASE("a byte budget is a hard limit; one too small names the minimum") {
  // Find what the session needs besides resident bundles.
  kx::EngineOptions probe;
  probe.ram_budget = "1%";
  auto p = Load(probe);
  REQUIRE(p.ok());
  const uint64_t fixed = (*p)->ram_budget().used() - (*p)->ram_budget().held("resident bundles");
  const uint64_t slot = kx::BundleTier::SlotBytes((*p)->sparse()->sidecar());
  p->reset();

  SECTION("just enough for 5 slots per layer") {
    kx::EngineOptions o;
    const uint64_t limit = fixed + 5 * 3 * slot + slot / 2;
    o.ram_budget = std::to_string(limit);
    auto e = Load(o);
    INFO(e.status().message());
    REQUIRE(e.ok());
    CHECK((*e)->sparse()->tier()->slots_per_layer() == 5);
    CHECK((*e)->ram_budget().limit() == limit);
    CHECK((*e)->ram_budget().used() <= limit);
    const auto got = Run(**e, Sequence());
    CHECK(MaxAbsDiff(got, Reference()) == 0.0);
    CHECK((*e)->ram_budget().peak() <= limit);
  }
  SECTION("below the fixed part") {
    kx::EngineOptions o;
    o.ram_budget = std::to_string(fixed - 1);
    auto e = Load(o);
    REQUIRE(!e.ok());
    const std::string msg(e.status().message());
    CHECK_THAT(msg, Catch::Contains("too small"));
    CHECK_THAT(msg, Catch::Contains("needs at least"));
  }
  SECTION("below the KV cache") {
    kx::EngineOptions o;
    o.ram_budget = "4K";
    auto e = Load(o);
    REQUIRE(!e.ok());
    CHECK_THAT(std::string(e.status().message()), Catch::Contains("KV cache"));
  }
  SECTION("not a size") {
    kx::EngineOptions o;
    o.ram_budget = "lots";
    auto e = Load(o);
    REQUIRE(!e.ok());
    CHECK_THAT(std::string(e.status().message()), Catch::Contains("--ram-budget"));
  }
  SECTION("an unknown policy") {
    kx::EngineOptions o;
    o.ram_budget = "50%";
    o.policy = "clairvoyant";
    auto e = Load(o);
    REQUIRE(!e.ok());
    CHECK_THAT(std::string(e.status().message()), Catch::Contains("tam"));
  }
}

TEST_CASE("without a budget the session's memory is accounted, not limited") {
  auto e = Load({});
  REQUIRE(e.ok());
  const kx::MemoryBudget& b = (*e)->ram_budget();
  CHECK(b.unlimited());
  CHECK(b.held("KV cache") > 0);
  CHECK(b.held("scratch") > 0);
  CHECK(b.held("predictors + sparse scratch") > 0);
  CHECK(b.held("resident bundles") == 0);
}

TEST_CASE("under a RAM tier the trace records predicted sets and the tier's statistics") {
  const std::string path = TempDir() + "/tier.kxtrace";
  {
    kx::EngineOptions o;
    o.ram_budget = "25%";
    o.policy = "tam-adaptive";
    o.trace_path = path;
    auto e = Load(o);
    REQUIRE(e.ok());
    REQUIRE((*e)->sparse()->UsesBundles(1));
    const auto got = Run(**e, Sequence());
    // Tracing does not change what is computed.
    CHECK(MaxAbsDiff(got, Reference()) == 0.0);
  }
  auto reader = kx::sparse::TraceReader::Open(path);
  INFO(reader.status().message());
  REQUIRE(reader.ok());
  kx::sparse::TraceRecord rec;
  int records = 0;
  uint64_t bytes = 0;
  bool lambda_ok = true;
  for (;;) {
    auto more = reader->Next(&rec);
    REQUIRE(more.ok());
    if (!*more) break;
    ++records;
    CHECK(rec.has_predicted);
    CHECK(!rec.has_actual);
    CHECK(rec.stats.present == kx::sparse::LayerStats::kKnownFields);
    CHECK(rec.stats.resident_groups <= 32);
    bytes += rec.stats.bytes_read;
    lambda_ok &= rec.stats.lambda >= 0.5 && rec.stats.lambda <= 0.95;
  }
  CHECK(records == 3 * static_cast<int>(Sequence().size()));
  CHECK(bytes > 0);
  CHECK(lambda_ok);
}

TEST_CASE("skipping misses reads only what the policy admits and changes the output") {
  const auto& ref = Reference();
  kx::EngineOptions o;
  o.ram_budget = "25%";
  o.policy = "static";  // never admits: every non-resident group is skipped
  o.tier_skip_misses = true;
  auto e = Load(o);
  REQUIRE(e.ok());
  const auto got = Run(**e, Sequence());
  const kx::TierStats& st = (*e)->sparse()->tier()->stats();
  CHECK(st.bytes_read == 0);
  CHECK(st.skipped > 0);
  CHECK(st.skipped == st.groups_needed - st.hits);
  CHECK(MaxAbsDiff(got, ref) > 0.0);
  // Only resident groups were computed.
  CHECK((*e)->sparse()->stats().predicted < static_cast<int64_t>(st.groups_needed) * 16);
}

TEST_CASE("under a RAM tier an abort check stops between tokens and leaves the tier exact") {
  kx::EngineOptions o;
  o.ram_budget = "50%";
  auto e = Load(o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  kx::BundleTier* tier = (*e)->sparse()->tier();
  REQUIRE(tier != nullptr);
  // The tier evaluates prompts token by token: one poll before each, none between layers
  // (the next layer's reads are in flight); stop at the fourth, after three tokens.
  struct Polls {
    int calls = 0;
    std::vector<float> progress;
  } polls;
  (*e)->SetAbortCheck(
      [](void* ctx, float progress) {
        auto* p = static_cast<Polls*>(ctx);
        p->progress.push_back(progress);
        return ++p->calls == 4;
      },
      &polls);
  const std::vector<int32_t>& seq = Sequence();
  const absl::Status st = (*e)->Eval(seq);
  CHECK(absl::IsCancelled(st));
  CHECK(polls.calls == 4);
  CHECK(polls.progress.back() == Approx(3.0 / static_cast<double>(seq.size())));
  CHECK((*e)->n_past() == 0);
  CHECK((*e)->Logits().empty());
  (*e)->SetAbortCheck(nullptr, nullptr);
  tier->residency().CheckInvariants();
  // The reads and pins of the stopped tokens are settled: what follows is exact.
  CHECK(MaxAbsDiff(Run(**e, seq), Reference()) == 0.0);
}

TEST_CASE("under a RAM tier a sidecar truncated during the session is a sticky error, not SIGBUS") {
  // Everything a token reads of the sidecar under a tier is owned memory (predictors and
  // permutation copied at load, bundles read into slots), so truncating the file fails the
  // reads instead of touching a vanished mapped page. A copy: the other cases keep theirs.
  const std::string copy = TempDir() + "/truncated.kairox.gguf";
  std::filesystem::copy_file(Tiny().sidecar, copy,
                             std::filesystem::copy_options::overwrite_existing);
  kx::EngineOptions o;
  o.ram_budget = "10%";
  o.sidecar = copy;
  auto e = Load(o);
  INFO(e.status().message());
  REQUIRE(e.ok());
  REQUIRE((*e)->sparse()->tier() != nullptr);
  const std::vector<int32_t>& seq = Sequence();
  REQUIRE((*e)->Eval({seq.data(), 4}).ok());
  REQUIRE(::truncate(copy.c_str(), 4096) == 0);
  // The next token that reads a bundle (or the first check of the file after it) fails.
  absl::Status st;
  size_t i = 4;
  for (; i < 12 && st.ok(); ++i) st = (*e)->Eval({seq.data() + i, 1});
  INFO(st.message());
  CHECK(absl::IsDataLoss(st));
  CHECK((*e)->n_past() == static_cast<int>(i) - 1);  // the failed token was rolled back
  // Sticky: nothing after it is computed from other bytes.
  CHECK_FALSE((*e)->Eval({seq.data() + i, 1}).ok());
  std::filesystem::remove(copy);
}

TEST_CASE("through the C ABI a sidecar truncated under a RAM tier is KX_STATUS_IO_ERROR") {
  const std::string copy = TempDir() + "/truncated-capi.kairox.gguf";
  std::filesystem::copy_file(Tiny().sidecar, copy,
                             std::filesystem::copy_options::overwrite_existing);
  kx_model* model = nullptr;
  REQUIRE(kx_model_load(Tiny().model.c_str(), nullptr, &model) == KX_STATUS_OK);
  kx_session_params p;
  REQUIRE(kx_session_params_init(&p, sizeof p) == KX_STATUS_OK);
  p.n_ctx = 64;
  p.n_threads = 2;
  p.sidecar = copy.c_str();
  p.ram_budget = "10%";
  kx_session* s = nullptr;
  INFO(kx_last_error());
  REQUIRE(kx_session_create(model, &p, &s) == KX_STATUS_OK);
  const std::vector<int32_t>& seq = Sequence();
  REQUIRE(kx_session_eval(s, seq.data(), 4, 0) == KX_STATUS_OK);
  REQUIRE(::truncate(copy.c_str(), 4096) == 0);
  kx_status st = KX_STATUS_OK;
  for (size_t i = 4; i < 12 && st == KX_STATUS_OK; ++i) st = kx_session_eval(s, &seq[i], 1, 0);
  CHECK(st == KX_STATUS_IO_ERROR);
  CHECK_THAT(std::string(kx_last_error()), Catch::Contains(copy));
  kx_session_free(s);
  kx_model_free(model);
  std::filesystem::remove(copy);
}
