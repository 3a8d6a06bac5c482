#include "prepare/prepare.h"

#include "kernels/cpu/down_blocks.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/timer.h"
#include "engine/engine.h"
#include "kernels/cpu/down_blocks.h"
#include "model/llama_ffn_activation.h"
#include "model/model.h"
#include "prepare/profile.h"
#include "sparse/bundle.h"
#include "sparse/coactivation.h"
#include "sparse/sidecar.h"

namespace kx {
namespace {

constexpr int kProfileBatch = 128;
// A predictor bias that no input can outvote: the neuron is always predicted.
constexpr float kPinnedBias = 1e4f;
constexpr int kCompareGroupSizes[] = {4, 8, 16, 32};
// A sparsity level must be < 1; a ReLU model whose neurons never fire is
// stored just below it.
constexpr double kMaxNaturalLevel = 0.999;

// Per layer, the fraction of (token, neuron) pairs that are inactive.
std::vector<double> NaturalSparsity(const std::vector<sparse::ActivityMatrix>& activity) {
  std::vector<double> out;
  for (const sparse::ActivityMatrix& a : activity) {
    int64_t active = 0;
    for (int64_t t = 0; t < a.n_tokens(); ++t) active += a.CountRow(t);
    const double pairs = static_cast<double>(a.n_tokens()) * a.n_neurons();
    out.push_back(pairs > 0 ? 1.0 - static_cast<double>(active) / pairs : 0.0);
  }
  return out;
}

double Seconds(int64_t since_ns) { return static_cast<double>(NowNs() - since_ns) * 1e-9; }

void Report(const PrepareOptions& o, const std::string& stage, int64_t done, int64_t total) {
  if (o.progress) o.progress(stage, done, total);
}

// Rows of `src` (n_out × cols) in permuted order: row i = src row perm[i].
template <typename T>
std::vector<T> PermuteRows(const std::vector<T>& src, const std::vector<int32_t>& perm,
                           size_t cols) {
  std::vector<T> out(src.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    std::copy_n(src.begin() + static_cast<size_t>(perm[i]) * cols, cols, out.begin() + i * cols);
  }
  return out;
}

absl::Status CheckOptions(const PrepareOptions& o) {
  if (!(o.sparsity > 0.0f && o.sparsity < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("sparsity ", o.sparsity, " is not in (0, 1)"));
  }
  if (o.levels.empty()) return absl::InvalidArgumentError("no sparsity levels");
  for (size_t i = 0; i < o.levels.size(); ++i) {
    if (!(o.levels[i] >= 0.0f && o.levels[i] < 1.0f) || (i > 0 && o.levels[i] <= o.levels[i - 1])) {
      return absl::InvalidArgumentError("sparsity levels must increase within [0, 1)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PrepareReport> Prepare(const PrepareOptions& opt_in) {
  PrepareOptions o = opt_in;
  KX_RETURN_IF_ERROR(CheckOptions(o));
  // The target level is always one of the stored levels.
  if (std::none_of(o.levels.begin(), o.levels.end(),
                   [&](float v) { return std::fabs(v - o.sparsity) < 1e-6f; })) {
    o.levels.push_back(o.sparsity);
    std::sort(o.levels.begin(), o.levels.end());
  }
  const int64_t t_start = NowNs();
  PrepareReport rep;
  rep.sidecar_path = o.sidecar_path.empty() ? sparse::DefaultSidecarPath(o.model_path)
                                            : o.sidecar_path;

  KX_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(o.model_path));
  const LlamaHParams& hp = model->hparams();
  // The down layout, and with it the groups: kBlocks keeps each of the
  // model's ffn_down blocks whole, so its groups are those blocks.
  bool can_blocks = true;
  for (const LlamaLayerWeights& w : model->weights().layers) {
    can_blocks = can_blocks && sparse::CanUseDownBlocks(w.ffn_down.type, hp.n_embd, hp.n_ff);
  }
  using Choice = PrepareOptions::DownLayoutChoice;
  if (o.down_layout == Choice::kBlocks && !can_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--down-layout blocks needs a Q4_1 ffn_down in every layer, n_embd a multiple of 16 and "
        "n_ff of 32; this model's layer 0 ffn_down is ",
        TypeName(model->weights().layers[0].ffn_down.type), " (use --down-layout rows)"));
  }
  const bool blocks = o.down_layout == Choice::kBlocks ||
                      (o.down_layout == Choice::kAuto && can_blocks && o.auto_down_type);
  const sparse::DownLayout down_layout =
      blocks ? sparse::DownLayout::kBlocks : sparse::DownLayout::kRows;
  const int group_size = blocks ? cpu::kDownBlocksGroup : o.group_size;
  rep.down_layout = sparse::DownLayoutName(down_layout);
  rep.group_size = group_size;

  EngineOptions eo;
  eo.n_threads = o.n_threads;
  eo.n_batch = kProfileBatch;
  eo.sparse = false;
  KX_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, eo));
  const int n_threads = engine->n_threads();
  for (const auto& L : model->weights().layers) {
    rep.model_bytes += L.ffn_up.bytes() + L.ffn_gate.bytes() + L.ffn_down.bytes();
  }

  // 1. Calibration tokens.
  int64_t t0 = NowNs();
  KX_ASSIGN_OR_RETURN(CalibrationSet calib,
                      BuildCalibration(*engine, o.calibration, [&](int64_t d, int64_t t) {
                        Report(o, "calibration", d, t);
                      }));
  rep.calibration_source = calib.source;
  rep.calibration_tokens = calib.n_tokens;
  rep.seconds_calibration = Seconds(t0);

  // 2. Profile: thresholds, then activity and predictor inputs. The ReLU
  // family's rule fixes the thresholds (active ⇔ A ≠ 0: 0, FATReLU t), so
  // it needs no magnitude pass, and its sparsity is what the model gives.
  t0 = NowNs();
  const bool relu_rule = IsReluFamily(hp.ffn_act);
  rep.activation_rule = sparse::ActivationRuleFor(hp.ffn_act);
  MagnitudeHistogram hist(hp.n_layer, hp.n_ff);
  std::vector<std::vector<float>> level_thresholds;
  std::vector<float> thresholds;
  if (relu_rule) {
    thresholds.assign(hp.n_layer,
                      hp.ffn_act == FfnActivation::kFatRelu ? hp.ffn_act_threshold : 0.0f);
  } else {
    KX_RETURN_IF_ERROR(RunCalibration(*engine, calib, &hist, [&](int64_t d, int64_t t) {
      Report(o, "profile (1/2)", d, t);
    }));
    for (float s : o.levels) level_thresholds.push_back(hist.Thresholds(s));
    thresholds = hist.Thresholds(o.sparsity);
  }
  ActivityRecorder rec(hp.n_layer, hp.n_embd, hp.n_ff, calib.n_tokens, thresholds);
  KX_RETURN_IF_ERROR(RunCalibration(*engine, calib, &rec, [&](int64_t d, int64_t t) {
    Report(o, "profile (2/2)", d, t);
  }));
  rep.seconds_profile = Seconds(t0);
  engine.reset();
  std::vector<double> natural;
  if (relu_rule) {
    // The levels collapse to one: the natural sparsity (mean over layers).
    natural = NaturalSparsity(rec.activity());
    double mean = 0.0;
    for (double v : natural) mean += v / hp.n_layer;
    o.sparsity = static_cast<float>(std::clamp(mean, 0.0, kMaxNaturalLevel));
    o.levels = {o.sparsity};
    level_thresholds = {thresholds};
    if (opt_in.sparsity_requested) {
      Log().warn("FFN activation {}: the requested sparsity/levels do not apply; thresholds are "
                 "the rule's ({}) and the sparsity is the natural {:.4f}",
                 rep.activation_rule, thresholds[0], o.sparsity);
    } else {
      Log().info("FFN activation {}: thresholds are the rule's ({}), natural sparsity {:.4f}",
                 rep.activation_rule, thresholds[0], o.sparsity);
    }
  }
  rep.sparsity = o.sparsity;

  const int64_t n_tok = calib.n_tokens;
  const int64_t n_held = std::max<int64_t>(
      1, static_cast<int64_t>(std::llround(n_tok * o.predictor.holdout_fraction)));
  const int64_t n_train = n_tok - n_held;
  if (n_train < 64) {
    return absl::InvalidArgumentError(absl::StrCat("only ", n_tok,
                                                   " calibration tokens: raise the budget"));
  }
  rep.held_out_tokens = n_held;

  sparse::SidecarData sd;
  KX_ASSIGN_OR_RETURN(sd.model_sha256, Sha256FileCached(o.model_path));
  sd.model_arch = hp.arch;
  sd.n_layer = hp.n_layer;
  sd.n_embd = hp.n_embd;
  sd.n_ff = hp.n_ff;
  sd.sparsity = o.sparsity;
  sd.sparsity_levels = o.levels;
  sd.group_size = group_size;
  sd.down_layout = down_layout;
  sd.activation_rule = rep.activation_rule;
  sd.layers.resize(hp.n_layer);
  rep.layers.resize(hp.n_layer);

  // 3. Grouping (co-activation of the training tokens; quality on held-out).
  t0 = NowNs();
  std::vector<sparse::ActivityMatrix> train_act, held_act;
  for (int l = 0; l < hp.n_layer; ++l) {
    train_act.push_back(rec.activity()[l].Slice(0, n_train));
    held_act.push_back(rec.activity()[l].Slice(n_train, n_tok));
  }
  // One layer's co-activation matrix at a time: it is n_ff² floats (485 MB at a 7B shape's
  // 11008 neurons), so holding every layer's would need 15.5 GB there (issue #17).
  if (o.compare_grouping) {
    for (int gs : kCompareGroupSizes) {
      if (hp.n_ff % gs != 0) continue;
      for (auto m : {sparse::GroupingMethod::kMetis, sparse::GroupingMethod::kFrequency,
                     sparse::GroupingMethod::kRandom}) {
        GroupingComparison gc;
        gc.group_size = gs;
        gc.method = m;
        rep.grouping_comparison.push_back(gc);
      }
    }
  }
  double seconds_compare = 0;
  for (int l = 0; l < hp.n_layer; ++l) {
    const sparse::Coactivation coact = sparse::ComputeCoactivation(train_act[l], n_threads);
    if (blocks) {
      std::vector<double> counts(static_cast<size_t>(hp.n_ff));
      for (int i = 0; i < hp.n_ff; ++i) counts[static_cast<size_t>(i)] = coact.at(i, i);
      sd.layers[l].perm = sparse::BlockPermutation(hp.n_ff, counts);
    } else {
      KX_ASSIGN_OR_RETURN(sd.layers[l].perm,
                          sparse::GroupNeurons(coact, group_size, o.grouping, 1 + l));
    }
    LayerReport& lr = rep.layers[l];
    lr.threshold = thresholds[l];
    lr.calib_sparsity = relu_rule ? natural[l] : hist.FractionAtOrBelow(l, thresholds[l]);
    lr.grouping = sparse::EvaluateGrouping(sd.layers[l].perm, group_size, held_act[l]);
    lr.active_fraction = lr.grouping.active_per_token / hp.n_ff;
    std::vector<float>& freq = sd.layers[l].freq;
    freq.resize(hp.n_ff);
    for (int i = 0; i < hp.n_ff; ++i) {
      const int n = sd.layers[l].perm[i];
      freq[i] = static_cast<float>(coact.at(n, n) / std::max<double>(1.0, n_train));
    }
    sd.layers[l].thresholds.resize(o.levels.size());
    for (size_t k = 0; k < o.levels.size(); ++k) sd.layers[l].thresholds[k] = level_thresholds[k][l];
    // The comparison's methods on this layer's matrix, averaged over layers as they come.
    const int64_t tc = NowNs();
    for (GroupingComparison& gc : rep.grouping_comparison) {
      const int64_t tm = NowNs();
      KX_ASSIGN_OR_RETURN(std::vector<int32_t> perm,
                          sparse::GroupNeurons(coact, gc.group_size, gc.method, 1 + l));
      const sparse::GroupingQuality q = sparse::EvaluateGrouping(perm, gc.group_size, held_act[l]);
      gc.mean.intra_coactivation += q.intra_coactivation / hp.n_layer;
      gc.mean.overfetch += q.overfetch / hp.n_layer;
      gc.mean.groups_per_token += q.groups_per_token / hp.n_layer;
      gc.mean.active_per_token += q.active_per_token / hp.n_layer;
      gc.seconds += Seconds(tm);
    }
    seconds_compare += Seconds(tc);
    Report(o, "grouping", l + 1, hp.n_layer);
  }
  // The report's grouping time is the chosen grouping's; the comparison has its own seconds.
  rep.seconds_grouping = Seconds(t0) - seconds_compare;

  // 4. Predictors: layer l from layer l-1's FFN input (adjacent), layer 0 from its own.
  t0 = NowNs();
  if (o.train_predictors) {
    sparse::RankSearchOptions ro = o.predictor;
    ro.train.n_threads = n_threads;
    // Rank by decode bytes: predictor bytes + predicted neurons × their bundle rows.
    const LlamaLayerWeights& w0 = model->weights().layers[0];
    ro.ffn_bytes_per_neuron = static_cast<int64_t>(w0.ffn_up.row_bytes + w0.ffn_gate.row_bytes +
                                                   w0.ffn_down.bytes() / hp.n_ff);
    for (int l = 0; l < hp.n_layer; ++l) {
      const std::vector<float>& x = rec.inputs()[l == 0 ? 0 : l - 1];
      KX_ASSIGN_OR_RETURN(sparse::Predictor p,
                          sparse::TrainForRecall(x.data(), n_tok, hp.n_embd, rec.activity()[l], ro,
                                                 &rep.layers[l].predictor));
      sparse::PredictorF16 h = sparse::ToF16Predictor(p);
      // Pin the neurons with the largest peaks: their bias makes the
      // predictor's logit effectively +inf.
      {
        const std::vector<float>& mx = rec.max_abs()[l];
        std::vector<int32_t> order(hp.n_ff);
        for (int i = 0; i < hp.n_ff; ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          return mx[a] != mx[b] ? mx[a] > mx[b] : a < b;
        });
        const int n_pin = std::clamp(static_cast<int>(std::lround(o.pin_fraction * hp.n_ff)), 0,
                                     hp.n_ff);
        for (int k = 0; k < n_pin; ++k) h.b2[order[k]] = kPinnedBias;
        LayerReport& lr = rep.layers[l];
        lr.pinned = n_pin;
        lr.max_abs_pinned_min = n_pin > 0 ? mx[order[n_pin - 1]] : 0.0f;
        lr.max_abs_median = mx[order[hp.n_ff / 2]];
      }
      {
        sparse::SidecarLayerData& L = sd.layers[l];
        L.has_predictor = true;
        L.pred_rank = h.rank;
        L.pred_threshold = h.threshold;
        L.w1 = h.w1;
        L.b1 = h.b1;
        const std::vector<uint16_t> w2 = PermuteRows(h.w2, L.perm, static_cast<size_t>(h.rank));
        L.w2t.resize(w2.size());
        for (int n = 0; n < hp.n_ff; ++n) {
          for (int k = 0; k < h.rank; ++k) {
            L.w2t[static_cast<size_t>(k) * hp.n_ff + n] = w2[static_cast<size_t>(n) * h.rank + k];
          }
        }
        L.b2 = PermuteRows(h.b2, L.perm, 1);
      }
      Report(o, "predictors", l + 1, hp.n_layer);
    }
  }
  rep.seconds_predictors = Seconds(t0);
  rec.inputs().clear();

  // 5. Bundles.
  t0 = NowNs();
  for (int l = 0; l < hp.n_layer; ++l) {
    const LlamaLayerWeights& w = model->weights().layers[l];
    const GgmlType down = blocks              ? w.ffn_down.type
                          : o.auto_down_type ? sparse::DefaultDownType(w.ffn_down.type, hp.n_embd)
                                             : o.down_type;
    KX_ASSIGN_OR_RETURN(sd.layers[l].layout,
                        sparse::MakeBundleLayout(hp.n_embd, hp.n_ff, group_size, w.ffn_up.type,
                                                 w.ffn_gate.type, down, down_layout));
    const sparse::BundleLayout& layout = sd.layers[l].layout;
    sd.layers[l].bundles.assign(layout.bundle_stride * layout.n_groups, 0);
    KX_RETURN_IF_ERROR(sparse::PackBundles(w.ffn_up, w.ffn_gate, w.ffn_down, sd.layers[l].perm,
                                           layout, sd.layers[l].bundles.data()));
    rep.bundle_bytes += sd.layers[l].bundles.size();
    if (l == 0) rep.down_type = TypeName(down);
    Report(o, "bundles", l + 1, hp.n_layer);
  }
  for (const auto& L : sd.layers) {
    if (L.has_predictor) {
      rep.predictor_bytes += 2 * (L.w1.size() + L.w2t.size()) + 4 * (L.b1.size() + L.b2.size());
    }
  }
  rep.seconds_bundles = Seconds(t0);

  nlohmann::json cj;
  cj["source"] = calib.source;
  cj["tokens"] = calib.n_tokens;
  cj["held_out_tokens"] = n_held;
  cj["seed"] = o.calibration.seed;
  cj["grouping"] = blocks ? "blocks" : sparse::GroupingMethodName(o.grouping);
  cj["down_layout"] = rep.down_layout;
  cj["predictor_input"] = "layer l-1 FFN input (layer 0: its own)";
  sd.calibration_json = cj.dump();
  KX_RETURN_IF_ERROR(sparse::WriteSidecar(sd, rep.sidecar_path));
  rep.seconds_total = Seconds(t_start);
  return rep;
}

std::string PrepareReport::ToJson() const {
  nlohmann::json j;
  j["sidecar"] = sidecar_path;
  j["calibration"] = {{"source", calibration_source},
                      {"tokens", calibration_tokens},
                      {"held_out_tokens", held_out_tokens}};
  j["down_type"] = down_type;
  j["down_layout"] = down_layout;
  j["group_size"] = group_size;
  j["activation_rule"] = activation_rule;
  j["sparsity"] = sparsity;
  j["bytes"] = {{"ffn_model", model_bytes}, {"bundles", bundle_bytes},
                {"predictors", predictor_bytes}};
  j["seconds"] = {{"calibration", seconds_calibration}, {"profile", seconds_profile},
                  {"grouping", seconds_grouping},       {"predictors", seconds_predictors},
                  {"bundles", seconds_bundles},         {"total", seconds_total}};
  nlohmann::json jl = nlohmann::json::array();
  for (const LayerReport& l : layers) {
    const sparse::PredictorReport& p = l.predictor;
    jl.push_back({{"threshold", l.threshold},
                      {"calib_sparsity", l.calib_sparsity},
                      {"active_fraction", l.active_fraction},
                      {"rank", p.rank},
                      {"pred_threshold", p.threshold},
                      {"recall", p.held_out_f16.recall},
                      {"precision", p.held_out_f16.precision},
                      {"predicted_fraction", p.held_out_f16.predicted_fraction},
                      {"static_recall", p.static_mask.recall},
                      {"static_precision", p.static_mask.precision},
                      {"beats_static", p.beats_static_mask},
                      {"groups_per_token", l.grouping.groups_per_token},
                      {"overfetch", l.grouping.overfetch},
                      {"intra_coactivation", l.grouping.intra_coactivation},
                      {"pinned", l.pinned},
                      {"max_abs_pinned_min", l.max_abs_pinned_min},
                      {"max_abs_median", l.max_abs_median}});
  }
  j["layers"] = jl;
  nlohmann::json cmp = nlohmann::json::array();
  for (const GroupingComparison& g : grouping_comparison) {
    cmp.push_back({{"group_size", g.group_size},
                   {"method", sparse::GroupingMethodName(g.method)},
                   {"intra_coactivation", g.mean.intra_coactivation},
                   {"overfetch", g.mean.overfetch},
                   {"groups_per_token", g.mean.groups_per_token},
                   {"seconds", g.seconds}});
  }
  j["grouping_comparison"] = cmp;
  return j.dump(2);
}

std::string PrepareReport::ToTable() const {
  std::string s = absl::StrFormat(
      "calibration: %s, %d tokens (%d held out); activation rule %s, sparsity %.4f\n"
      "layer  t_l       active  rank  p_thr  recall  prec   pred%%   static_rec static_prec  "
      "groups/tok overfetch  pinned(peak>=  median)\n",
      calibration_source, calibration_tokens, held_out_tokens, activation_rule, sparsity);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerReport& r = layers[l];
    const sparse::PredictorReport& p = r.predictor;
    absl::StrAppendFormat(&s,
                          "%5d  %.5f  %5.1f%%  %4d  %.2f   %.3f   %.3f  %5.1f%%  %.3f      %.3f  "
                          "      %6.1f     %.3f    %3d %8.2f %7.3f\n",
                          l, r.threshold, 100 * r.active_fraction, p.rank, p.threshold,
                          p.held_out_f16.recall, p.held_out_f16.precision,
                          100 * p.held_out_f16.predicted_fraction, p.static_mask.recall,
                          p.static_mask.precision, r.grouping.groups_per_token,
                          r.grouping.overfetch, r.pinned, r.max_abs_pinned_min,
                          r.max_abs_median);
  }
  if (!grouping_comparison.empty()) {
    absl::StrAppend(&s, "\ngrouping on held-out tokens (mean over layers)\n"
                        "  GS  method     intra_coact  overfetch  groups/tok  seconds\n");
    for (const GroupingComparison& g : grouping_comparison) {
      absl::StrAppendFormat(&s, "%4d  %-9s  %.4f       %.3f      %7.1f     %.2f\n", g.group_size,
                            sparse::GroupingMethodName(g.method), g.mean.intra_coactivation,
                            g.mean.overfetch, g.mean.groups_per_token, g.seconds);
    }
  }
  absl::StrAppendFormat(&s,
                        "\nbundles %.1f MiB (FFN in the model %.1f MiB; down %s %s, GS %d), "
                        "predictors "
                        "%.1f MiB\ntime: calibration %.1fs, profile %.1fs, grouping %.1fs, "
                        "predictors %.1fs, bundles %.1fs, total %.1fs\n",
                        bundle_bytes / 1048576.0, model_bytes / 1048576.0, down_layout, down_type,
                        group_size, predictor_bytes / 1048576.0, seconds_calibration, seconds_profile,
                        seconds_grouping, seconds_predictors, seconds_bundles, seconds_total);
  return s;
}

}  // namespace kx
