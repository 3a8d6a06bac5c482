#include "sparse/grouping.h"

#include <metis.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "base/check.h"

namespace kx::sparse {
namespace {

static_assert(sizeof(idx_t) == 4, "libmetis-dev is built with 32-bit idx_t");

// METIS sums edge weights in 32-bit idx_t (cuts, vertex degrees): all
// adjacency weights together stay under this.
constexpr int64_t kMetisTotalWeightBudget = int64_t{1} << 30;

// Swap refinement stops after this many passes over the neurons, and ignores
// gains below this share of the strongest edge (float noise, no cycling).
constexpr double kRefineMinRelativeGain = 1e-6;
// A pass that raises the objective by less than this share ends refinement.
constexpr double kRefineMinPassGain = 1e-3;

absl::Status CheckGroupSize(int n, int group_size) {
  if (n <= 0) return absl::InvalidArgumentError("grouping needs at least one neuron");
  if (group_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("group size must be positive, got ", group_size));
  }
  if (n % group_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group size ", group_size, " does not divide the ", n, " neurons"));
  }
  if (n / group_size > kMaxGroupsPerLayer) {
    return absl::InvalidArgumentError(
        absl::StrCat("group size ", group_size, " gives ", n / group_size, " groups for ", n,
                     " neurons; at most ", kMaxGroupsPerLayer, " groups per layer are supported"));
  }
  return absl::OkStatus();
}

// Frequency-descending, id-ascending order of `ids`.
void SortByFrequency(const Coactivation& c, std::vector<int32_t>* ids) {
  std::sort(ids->begin(), ids->end(), [&](int32_t a, int32_t b) {
    const float fa = c.frequency(a), fb = c.frequency(b);
    return fa != fb ? fa > fb : a < b;
  });
}

// The symmetric k-nearest-neighbour co-activation graph in METIS's CSR form.
struct MetisGraph {
  std::vector<idx_t> xadj;
  std::vector<idx_t> adjncy;
  std::vector<idx_t> adjwgt;
};

MetisGraph BuildGraph(const Coactivation& c) {
  const int n = c.n;
  // Undirected edges as (lo << 32 | hi), from each vertex's strongest neighbours.
  std::vector<uint64_t> edges;
  std::vector<std::pair<float, int32_t>> cand;
  for (int i = 0; i < n; ++i) {
    cand.clear();
    for (int j = 0; j < n; ++j) {
      if (j != i && c.at(i, j) > 0.0f) cand.emplace_back(c.at(i, j), j);
    }
    auto stronger = [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    if (static_cast<int>(cand.size()) > kMetisNeighbours) {
      std::nth_element(cand.begin(), cand.begin() + kMetisNeighbours, cand.end(), stronger);
      cand.resize(kMetisNeighbours);
    }
    for (const auto& [w, j] : cand) {
      const uint64_t lo = static_cast<uint64_t>(std::min(i, j));
      const uint64_t hi = static_cast<uint64_t>(std::max(i, j));
      edges.push_back(lo << 32 | hi);
    }
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());

  float max_count = 0.0f;
  std::vector<int32_t> degree(n, 0);
  for (uint64_t e : edges) {
    const int lo = static_cast<int>(e >> 32), hi = static_cast<int>(e & 0xffffffffu);
    max_count = std::max(max_count, c.at(lo, hi));
    ++degree[lo];
    ++degree[hi];
  }
  const int64_t n_adj = 2 * static_cast<int64_t>(edges.size());
  const int64_t max_weight =
      n_adj == 0 ? 1 : std::clamp<int64_t>(kMetisTotalWeightBudget / n_adj, 1, kMetisMaxEdgeWeight);

  MetisGraph g;
  g.xadj.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) g.xadj[i + 1] = g.xadj[i] + degree[i];
  g.adjncy.resize(n_adj);
  g.adjwgt.resize(n_adj);
  std::vector<idx_t> fill(g.xadj.begin(), g.xadj.end() - 1);
  for (uint64_t e : edges) {
    const int lo = static_cast<int>(e >> 32), hi = static_cast<int>(e & 0xffffffffu);
    const double scaled =
        std::round(static_cast<double>(c.at(lo, hi)) / max_count * static_cast<double>(max_weight));
    const idx_t w = static_cast<idx_t>(std::max(1.0, scaled));
    g.adjncy[fill[lo]] = hi;
    g.adjwgt[fill[lo]++] = w;
    g.adjncy[fill[hi]] = lo;
    g.adjwgt[fill[hi]++] = w;
  }
  return g;
}

// METIS part of each neuron (−1 when the graph has no edges to partition).
absl::StatusOr<std::vector<int32_t>> MetisParts(const Coactivation& c, int n_parts, uint64_t seed) {
  std::vector<int32_t> part(c.n, -1);
  if (n_parts == 1) {
    std::fill(part.begin(), part.end(), 0);
    return part;
  }
  MetisGraph g = BuildGraph(c);
  if (g.adjncy.empty()) return part;  // nothing co-fires: repair places everyone

  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_NUMBERING] = 0;
  options[METIS_OPTION_OBJTYPE] = METIS_OBJTYPE_CUT;
  // METIS seeds a 31-bit generator; fold the 64-bit seed into it.
  options[METIS_OPTION_SEED] = static_cast<idx_t>((seed ^ (seed >> 31)) & 0x7fffffffu);
  idx_t nvtxs = c.n;
  idx_t ncon = 1;
  idx_t nparts = n_parts;
  idx_t objval = 0;
  std::vector<idx_t> metis_part(c.n, 0);
  const int rc = METIS_PartGraphKway(&nvtxs, &ncon, g.xadj.data(), g.adjncy.data(),
                                     /*vwgt=*/nullptr, /*vsize=*/nullptr, g.adjwgt.data(), &nparts,
                                     /*tpwgts=*/nullptr, /*ubvec=*/nullptr, options, &objval,
                                     metis_part.data());
  if (rc != METIS_OK) {
    return absl::InternalError(absl::StrCat("METIS_PartGraphKway failed (code ", rc, ") on ", c.n,
                                            " neurons into ", n_parts, " parts"));
  }
  for (int i = 0; i < c.n; ++i) part[i] = metis_part[i];
  return part;
}

// `c` with its off-diagonal counts replaced by the affinity; the diagonal
// (frequencies) is kept for ordering.
Coactivation ApplyAffinity(const Coactivation& c, EdgeAffinity kind) {
  Coactivation a = c;
  if (kind == EdgeAffinity::kCount) return a;
  const int n = c.n;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const double both = c.at(i, j);
      const double fi = c.frequency(i), fj = c.frequency(j);
      double v = 0.0;
      if (kind == EdgeAffinity::kJaccard) {
        const double either = fi + fj - both;
        v = either > 0.0 ? both / either : 0.0;
      } else {
        v = fi > 0.0 && fj > 0.0 ? both / std::sqrt(fi * fj) : 0.0;
      }
      a.counts[static_cast<size_t>(i) * n + j] = static_cast<float>(v);
    }
  }
  return a;
}

// Pairwise-swap refinement of exact-size groups (Kernighan–Lin style, one
// neuron at a time): for each neuron u, the swap with a neuron v of another
// group that most raises the summed intra-group affinity is applied if it gains.
// tie[x][g] = Σ_{y∈g, y≠x} w(x, y) is kept up to date so a pass is O(n²).
void RefineBySwaps(const Coactivation& a, std::vector<std::vector<int32_t>>* groups) {
  const int n = a.n;
  const int n_groups = static_cast<int>(groups->size());
  if (n_groups < 2) return;
  auto w = [&](int x, int y) { return x == y ? 0.0 : static_cast<double>(a.at(x, y)); };
  std::vector<int32_t> group_of(n);
  std::vector<int32_t> slot_of(n);
  for (int g = 0; g < n_groups; ++g) {
    for (size_t k = 0; k < (*groups)[g].size(); ++k) {
      group_of[(*groups)[g][k]] = g;
      slot_of[(*groups)[g][k]] = static_cast<int32_t>(k);
    }
  }
  std::vector<double> tie(static_cast<size_t>(n) * n_groups, 0.0);
  double max_w = 0.0;
  for (int x = 0; x < n; ++x) {
    for (int y = 0; y < n; ++y) {
      tie[static_cast<size_t>(x) * n_groups + group_of[y]] += w(x, y);
      max_w = std::max(max_w, w(x, y));
    }
  }
  if (max_w <= 0.0) return;
  const double min_gain = kRefineMinRelativeGain * max_w;
  double objective = 0.0;  // Σ over groups of the summed w of their pairs
  for (int x = 0; x < n; ++x)
    objective += 0.5 * tie[static_cast<size_t>(x) * n_groups + group_of[x]];
  for (int pass = 0; pass < kRefineMaxPasses; ++pass) {
    int64_t swaps = 0;
    double pass_gain = 0.0;
    for (int u = 0; u < n; ++u) {
      const int ga = group_of[u];
      const double* tu = &tie[static_cast<size_t>(u) * n_groups];
      double best_gain = min_gain;
      int best_v = -1;
      for (int v = 0; v < n; ++v) {
        const int gb = group_of[v];
        if (gb == ga) continue;
        const double* tv = &tie[static_cast<size_t>(v) * n_groups];
        const double gain = tu[gb] - tu[ga] + tv[ga] - tv[gb] - 2.0 * w(u, v);
        if (gain > best_gain) {
          best_gain = gain;
          best_v = v;
        }
      }
      if (best_v < 0) continue;
      const int v = best_v;
      const int gb = group_of[v];
      for (int x = 0; x < n; ++x) {
        const double d = w(x, v) - w(x, u);
        tie[static_cast<size_t>(x) * n_groups + ga] += d;
        tie[static_cast<size_t>(x) * n_groups + gb] -= d;
      }
      std::swap((*groups)[ga][slot_of[u]], (*groups)[gb][slot_of[v]]);
      std::swap(slot_of[u], slot_of[v]);
      group_of[u] = gb;
      group_of[v] = ga;
      ++swaps;
      pass_gain += best_gain;
    }
    objective += pass_gain;
    // The last passes move a handful of neurons for a sliver of the objective.
    if (swaps == 0 || pass_gain < kRefineMinPassGain * objective) break;
  }
}

// Orders groups and their members (see GroupNeurons) and flattens them.
std::vector<int32_t> Flatten(const Coactivation& c, std::vector<std::vector<int32_t>> groups) {
  std::vector<double> mass(groups.size(), 0.0);
  for (size_t g = 0; g < groups.size(); ++g) {
    SortByFrequency(c, &groups[g]);
    for (int32_t v : groups[g]) mass[g] += c.frequency(v);
  }
  std::vector<int32_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (mass[a] != mass[b]) return mass[a] > mass[b];
    return groups[a].front() < groups[b].front();  // groups are disjoint and non-empty
  });
  std::vector<int32_t> perm;
  perm.reserve(c.n);
  for (int32_t g : order) perm.insert(perm.end(), groups[g].begin(), groups[g].end());
  return perm;
}

}  // namespace

namespace internal {

std::vector<std::vector<int32_t>> RepairPartition(const Coactivation& c, int group_size,
                                                  const std::vector<int32_t>& part) {
  const int n = c.n;
  const int n_groups = n / group_size;
  KX_CHECK(static_cast<int>(part.size()) == n && n % group_size == 0);
  std::vector<std::vector<int32_t>> groups(n_groups);
  std::vector<int32_t> displaced;
  for (int v = 0; v < n; ++v) {
    if (part[v] >= 0 && part[v] < n_groups) {
      groups[part[v]].push_back(v);
    } else {
      displaced.push_back(v);
    }
  }

  // Shed the weakest-tied members of over-full groups.
  std::vector<double> tie;
  for (auto& members : groups) {
    if (static_cast<int>(members.size()) <= group_size) continue;
    tie.assign(members.size(), 0.0);
    for (size_t a = 0; a < members.size(); ++a) {
      for (size_t b = 0; b < members.size(); ++b) {
        if (a != b) tie[a] += c.at(members[a], members[b]);
      }
    }
    while (static_cast<int>(members.size()) > group_size) {
      size_t weakest = 0;
      for (size_t a = 1; a < members.size(); ++a) {
        if (tie[a] < tie[weakest] || (tie[a] == tie[weakest] && members[a] > members[weakest])) {
          weakest = a;
        }
      }
      const int32_t v = members[weakest];
      displaced.push_back(v);
      members.erase(members.begin() + static_cast<std::ptrdiff_t>(weakest));
      tie.erase(tie.begin() + static_cast<std::ptrdiff_t>(weakest));
      for (size_t a = 0; a < members.size(); ++a) tie[a] -= c.at(members[a], v);
    }
  }

  // Place the displaced, most frequent first, where they gain most.
  SortByFrequency(c, &displaced);
  for (int32_t v : displaced) {
    int best = -1;
    double best_gain = -1.0;
    int best_free = -1;
    for (int g = 0; g < n_groups; ++g) {
      const int free_slots = group_size - static_cast<int>(groups[g].size());
      if (free_slots <= 0) continue;
      double gain = 0.0;
      for (int32_t u : groups[g]) gain += c.at(v, u);
      if (gain > best_gain || (gain == best_gain && free_slots > best_free)) {
        best = g;
        best_gain = gain;
        best_free = free_slots;
      }
    }
    KX_CHECK(best >= 0);  // n == n_groups * group_size, so a free slot exists
    groups[best].push_back(v);
  }
  return groups;
}

}  // namespace internal

const char* GroupingMethodName(GroupingMethod m) {
  switch (m) {
    case GroupingMethod::kMetis:
      return "metis";
    case GroupingMethod::kFrequency:
      return "frequency";
    case GroupingMethod::kRandom:
      return "random";
  }
  return "unknown";
}

const char* EdgeAffinityName(EdgeAffinity a) {
  switch (a) {
    case EdgeAffinity::kCount:
      return "count";
    case EdgeAffinity::kJaccard:
      return "jaccard";
    case EdgeAffinity::kCosine:
      return "cosine";
  }
  return "unknown";
}

absl::StatusOr<std::vector<int32_t>> GroupNeurons(const Coactivation& c, int group_size,
                                                  GroupingMethod m, uint64_t seed,
                                                  EdgeAffinity affinity) {
  if (static_cast<int64_t>(c.counts.size()) != static_cast<int64_t>(c.n) * c.n) {
    return absl::InvalidArgumentError(absl::StrCat("co-activation matrix has ", c.counts.size(),
                                                   " counts for ", c.n, " neurons"));
  }
  KX_RETURN_IF_ERROR(CheckGroupSize(c.n, group_size));
  std::vector<int32_t> perm(c.n);
  std::iota(perm.begin(), perm.end(), 0);
  switch (m) {
    case GroupingMethod::kFrequency:
      SortByFrequency(c, &perm);
      return perm;
    case GroupingMethod::kRandom: {
      std::mt19937_64 rng(seed);
      std::shuffle(perm.begin(), perm.end(), rng);
      return perm;
    }
    case GroupingMethod::kMetis: {
      const Coactivation a = ApplyAffinity(c, affinity);
      KX_ASSIGN_OR_RETURN(std::vector<int32_t> part, MetisParts(a, c.n / group_size, seed));
      std::vector<std::vector<int32_t>> groups = internal::RepairPartition(a, group_size, part);
      RefineBySwaps(a, &groups);
      return Flatten(c, std::move(groups));
    }
  }
  return absl::InvalidArgumentError("unknown grouping method");
}

absl::Status ValidatePermutation(std::span<const int32_t> perm, int n) {
  if (static_cast<int64_t>(perm.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("permutation has ", perm.size(), " entries, expected ", n));
  }
  std::vector<bool> seen(n, false);
  for (size_t k = 0; k < perm.size(); ++k) {
    const int32_t v = perm[k];
    if (v < 0 || v >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("permutation entry ", k, " is ", v, ", outside [0, ", n, ")"));
    }
    if (seen[v]) {
      return absl::InvalidArgumentError(
          absl::StrCat("neuron ", v, " appears twice in the permutation (entry ", k, ")"));
    }
    seen[v] = true;
  }
  return absl::OkStatus();
}

GroupingQuality EvaluateGrouping(const std::vector<int32_t>& perm, int group_size,
                                 const ActivityMatrix& held_out) {
  const int n = held_out.n_neurons();
  KX_CHECK(group_size >= 1 && n % group_size == 0);
  KX_CHECK_MSG(ValidatePermutation(perm, n).ok(), "EvaluateGrouping needs a permutation");
  const int n_groups = n / group_size;
  std::vector<int32_t> group_of(n);
  for (int k = 0; k < n; ++k) group_of[perm[k]] = k / group_size;

  std::vector<int32_t> active_in(n_groups, 0);
  std::vector<int32_t> touched;
  std::vector<int64_t> pair_count(n_groups, 0);  // Σ_t pairs co-active inside group g
  int64_t total_active = 0;
  int64_t total_touched = 0;
  for (int64_t t = 0; t < held_out.n_tokens(); ++t) {
    const uint64_t* row = held_out.Row(t);
    touched.clear();
    for (int w = 0; w < held_out.words_per_row(); ++w) {
      for (uint64_t bits = row[w]; bits != 0; bits &= bits - 1) {
        const int g = group_of[w * 64 + std::countr_zero(bits)];
        if (active_in[g]++ == 0) touched.push_back(g);
      }
    }
    for (int32_t g : touched) {
      const int64_t k = active_in[g];
      total_active += k;
      pair_count[g] += k * (k - 1) / 2;
      active_in[g] = 0;
    }
    total_touched += static_cast<int64_t>(touched.size());
  }

  GroupingQuality q;
  const int64_t n_tokens = held_out.n_tokens();
  if (n_tokens == 0) return q;
  q.active_per_token = static_cast<double>(total_active) / static_cast<double>(n_tokens);
  q.groups_per_token = static_cast<double>(total_touched) / static_cast<double>(n_tokens);
  const int64_t loaded = total_touched * group_size;
  q.overfetch =
      loaded == 0 ? 0.0 : static_cast<double>(loaded - total_active) / static_cast<double>(loaded);
  if (group_size >= 2) {
    const double pairs_per_group = 0.5 * group_size * (group_size - 1);
    double sum = 0.0;
    for (int64_t pc : pair_count) sum += static_cast<double>(pc);
    q.intra_coactivation =
        sum / pairs_per_group / static_cast<double>(n_groups) / static_cast<double>(n_tokens);
  }
  return q;
}

}  // namespace kx::sparse
