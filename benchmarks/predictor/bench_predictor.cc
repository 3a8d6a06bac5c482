// Predictor benchmark on planted synthetic data at the default model's shape:
// training time per rank (one layer, extrapolated to n_layers), TrainForRecall
// time and quality against the static mask, single-token RunPredictor time,
// and the decode bytes the F16 predictors add.
//
//   bench_predictor [--tokens 12288] [--n_in 576] [--n_out 1536] [--planted 48]
//                   [--noise 0.02] [--threads 2] [--epochs 6] [--layers 30]
//                   [--data DIR --x_layer A --y_layer B]   real data instead of planted:
//                       DIR/xA.bin (float32 tokens × n_in), DIR/yB.bin (uint8 0/1 tokens × n_out)
//                   [--ffn_bytes_per_neuron 1080] [--model_bytes 98e6] [--ranks 16,32,64,128,256]
//                   [--repeats 3] [--lr 3e-2]
//                   [--batch 256] [--pos_weight 3]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/timer.h"
#include "sparse/predictor.h"
#include "sparse/predictor_synthetic.h"

namespace {

struct Args {
  int64_t tokens = 12288;
  int n_in = 576, n_out = 1536, planted = 48, threads = 2, epochs = 6, layers = 30, repeats = 3;
  double noise = 0.02, model_bytes = 98e6, lr = 3e-2, pos_weight = 3;
  int batch = 256;
  int64_t ffn_bytes_per_neuron = 1080;  // SmolLM2 Q4_1: 3 rows · 576 · 20/32
  std::string data;
  int x_layer = 0, y_layer = 1;
  std::vector<int> ranks = {16, 32, 64, 128, 256};
};

std::vector<int> ParseList(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    const char* c = std::strchr(p, ',');
    if (!c) break;
    p = c + 1;
  }
  return v;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--tokens")
      a.tokens = std::atoll(v);
    else if (k == "--n_in")
      a.n_in = std::atoi(v);
    else if (k == "--n_out")
      a.n_out = std::atoi(v);
    else if (k == "--planted")
      a.planted = std::atoi(v);
    else if (k == "--noise")
      a.noise = std::atof(v);
    else if (k == "--threads")
      a.threads = std::atoi(v);
    else if (k == "--epochs")
      a.epochs = std::atoi(v);
    else if (k == "--layers")
      a.layers = std::atoi(v);
    else if (k == "--repeats")
      a.repeats = std::atoi(v);
    else if (k == "--model_bytes")
      a.model_bytes = std::atof(v);
    else if (k == "--lr")
      a.lr = std::atof(v);
    else if (k == "--pos_weight")
      a.pos_weight = std::atof(v);
    else if (k == "--batch")
      a.batch = std::atoi(v);
    else if (k == "--data")
      a.data = v;
    else if (k == "--x_layer")
      a.x_layer = std::atoi(v);
    else if (k == "--y_layer")
      a.y_layer = std::atoi(v);
    else if (k == "--ranks")
      a.ranks = ParseList(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

// CPU seconds of the whole process (all threads): on a shared machine this,
// divided by the thread count, estimates the wall time on idle cores.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(1);
  }
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Hidden states and activity dumped by a profiling script (see the flags).
kx::sparse::PlantedData LoadData(const Args& a) {
  kx::sparse::PlantedData d;
  const std::vector<char> xb = ReadFile(a.data + "/x" + std::to_string(a.x_layer) + ".bin");
  const std::vector<char> yb = ReadFile(a.data + "/y" + std::to_string(a.y_layer) + ".bin");
  d.n_in = a.n_in;
  d.n_out = a.n_out;
  d.n_tokens = static_cast<int64_t>(xb.size() / (sizeof(float) * a.n_in));
  if (static_cast<int64_t>(yb.size()) != d.n_tokens * a.n_out) {
    std::fprintf(stderr, "x and y token counts differ\n");
    std::exit(1);
  }
  d.x.resize(d.n_tokens * a.n_in);
  std::memcpy(d.x.data(), xb.data(), d.x.size() * sizeof(float));
  d.labels = kx::sparse::ActivityMatrix(d.n_tokens, a.n_out);
  for (int64_t t = 0; t < d.n_tokens; ++t) {
    for (int n = 0; n < a.n_out; ++n) d.labels.Set(t, n, yb[t * a.n_out + n] != 0);
  }
  return d;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kx::sparse;
  Args a = Parse(argc, argv);
  PlantedData d;
  if (!a.data.empty()) {
    d = LoadData(a);
    a.tokens = std::min(a.tokens, d.n_tokens);
    std::printf("data %s: x of layer %d, labels of layer %d, %lld tokens\n", a.data.c_str(),
                a.x_layer, a.y_layer, static_cast<long long>(a.tokens));
  } else {
    std::printf("planted data: %lld tokens, n_in %d, n_out %d, planted rank %d, noise %.3f\n",
                static_cast<long long>(a.tokens), a.n_in, a.n_out, a.planted, a.noise);
    d = MakePlantedData(a.tokens, a.n_in, a.n_out, a.planted, 7, a.noise);
  }
  const int64_t n_hold = a.tokens / 10, n_train = a.tokens - n_hold;
  const ActivityMatrix train = d.labels.Slice(0, n_train), hold = d.labels.Slice(n_train, a.tokens);
  const float* hold_x = d.x.data() + n_train * a.n_in;
  nlohmann::json out;
  out["shape"] = {{"tokens", a.tokens},
                  {"n_in", a.n_in},
                  {"n_out", a.n_out},
                  {"threads", a.threads},
                  {"epochs", a.epochs}};

  std::printf("\n%6s %9s %12s %8s %8s %8s %8s %8s %12s %10s\n", "rank", "train_s", "x_layers_s",
              "recall", "prec", "pred_fr", "f16_rec", "static_r", "f16_bytes", "decode_%");
  const kx::cpu::KernelTable& kt = kx::cpu::Kernels();
  for (int r : a.ranks) {
    TrainOptions o;
    o.rank = r;
    o.epochs = a.epochs;
    o.n_threads = a.threads;
    o.lr = static_cast<float>(a.lr);
    o.batch = a.batch;
    o.pos_weight = static_cast<float>(a.pos_weight);
    TrainStats st;  // seconds only: recording the loss costs time
    const int64_t t_start = kx::NowNs();
    const double cpu_start = CpuSeconds();
    auto p = TrainPredictor(d.x.data(), n_train, a.n_in, train, o);
    st.seconds = static_cast<double>(kx::NowNs() - t_start) * 1e-9;
    const double cpu_s = CpuSeconds() - cpu_start;
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
      return 1;
    }
    const PredictorMetrics m = EvaluatePredictor(*p, hold_x, n_hold, hold, a.threads);
    const PredictorMetrics m16 =
        EvaluatePredictor(RoundedToF16(*p), hold_x, n_hold, hold, a.threads);
    const StaticMaskEval s = EvaluateStaticMask(train, hold, m.predicted_fraction);
    const PredictorF16 h = ToF16Predictor(*p);
    std::vector<float> hidden(r), logits(a.n_out);
    std::vector<double> ns;
    for (int rep = 0; rep < a.repeats; ++rep) {
      const int64_t t0 = kx::NowNs();
      constexpr int kTokens = 200;
      for (int t = 0; t < kTokens; ++t) {
        RunPredictor(h.View(), kt, hold_x + (t % n_hold) * a.n_in, hidden.data(), logits.data());
      }
      ns.push_back(static_cast<double>(kx::NowNs() - t0) / kTokens);
    }
    const double frac = static_cast<double>(h.WeightBytes()) * a.layers / a.model_bytes;
    std::printf("%6d %9.2f %12.1f %8.4f %8.4f %8.4f %8.4f %8.4f %12lld %9.2f%%\n", r, st.seconds,
                st.seconds * a.layers, m.recall, m.precision, m.predicted_fraction, m16.recall,
                s.recall, static_cast<long long>(h.WeightBytes()), 100.0 * frac);
    out["ranks"].push_back({{"rank", r},
                            {"train_s", st.seconds},
                            {"train_cpu_s", cpu_s},
                            {"layers_s", st.seconds * a.layers},
                            {"recall", m.recall},
                            {"precision", m.precision},
                            {"predicted_fraction", m.predicted_fraction},
                            {"recall_f16", m16.recall},
                            {"precision_f16", m16.precision},
                            {"static_recall", s.recall},
                            {"static_precision", s.precision},
                            {"f16_bytes", h.WeightBytes()},
                            {"decode_fraction", frac},
                            {"run_ns_median", Median(ns)}});
    std::printf(
        "       cpu %.2f s (/%d threads = %.2f s; x%d layers = %.1f s); run_predictor "
        "%.1f us/token (median of %d)\n",
        cpu_s, a.threads, cpu_s / a.threads, a.layers, cpu_s / a.threads * a.layers,
        Median(ns) * 1e-3, a.repeats);
  }

  RankSearchOptions so;
  so.train.epochs = a.epochs;
  so.train.n_threads = a.threads;
  so.train.lr = static_cast<float>(a.lr);
  so.train.batch = a.batch;
  so.train.pos_weight = static_cast<float>(a.pos_weight);
  so.ranks = a.ranks;
  so.ffn_bytes_per_neuron = a.ffn_bytes_per_neuron;
  PredictorReport rep;
  const double cpu_start = CpuSeconds();
  auto p = TrainForRecall(d.x.data(), a.tokens, a.n_in, d.labels, so, &rep);
  const double cpu_s = CpuSeconds() - cpu_start;
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
    return 1;
  }
  std::printf("\nTrainForRecall: %.2f s wall, %.2f s cpu (/%d threads x%d layers = %.1f s)\n  %s\n",
              rep.train_seconds, cpu_s, a.threads, a.layers, cpu_s / a.threads * a.layers,
              rep.note.c_str());
  for (const RankTrial& t : rep.trials) {
    std::printf(
        "  trial rank %d: recall %.4f precision %.4f predicted %.4f (%.2f s); at target: "
        "threshold %.3f predicted %.4f bytes %lld\n",
        t.rank, t.recall, t.precision, t.predicted_fraction, t.seconds, t.threshold_at_target,
        t.fraction_at_target, static_cast<long long>(t.bytes_at_target));
  }
  std::printf("  f16: recall %.4f precision %.4f; beats static mask: %s\n", rep.held_out_f16.recall,
              rep.held_out_f16.precision, rep.beats_static_mask ? "yes" : "no");
  out["search"] = {{"rank", rep.rank},
                   {"threshold", rep.threshold},
                   {"seconds", rep.train_seconds},
                   {"cpu_s", cpu_s},
                   {"recall", rep.recall},
                   {"precision", rep.precision},
                   {"predicted_fraction", rep.predicted_fraction},
                   {"static_recall", rep.static_mask.recall},
                   {"static_precision", rep.static_mask.precision}};
  std::printf("\n%s\n", out.dump().c_str());
  return 0;
}
