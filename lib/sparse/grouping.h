// Neuron grouping: partitions one FFN layer's n_ff neurons into groups of
// exactly GS neurons so that neurons that fire together sit together. A group
// is one contiguous read (a "bundle") when weights move between memory tiers,
// so a good grouping touches fewer groups per token and loads fewer inactive
// neurons with the active ones.
//
// Usage:
//   auto c = kx::sparse::ComputeCoactivation(calibration, n_threads);
//   KX_ASSIGN_OR_RETURN(std::vector<int32_t> perm,
//       kx::sparse::GroupNeurons(c, 16, kx::sparse::GroupingMethod::kMetis, 42));
//   // group g holds neurons perm[g*16 .. g*16+16)
//   kx::sparse::GroupingQuality q = kx::sparse::EvaluateGrouping(perm, 16, held_out);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "sparse/activity.h"
#include "sparse/coactivation.h"

namespace kx::sparse {

// The most groups one layer may have (the runtime's per-layer group tables).
// kMaxGroupsPerLayer: sparse/activity.h

enum class GroupingMethod {
  // METIS k-way partition of the co-activation graph, then a repair pass that
  // makes every part exactly GS neurons (see GroupNeurons).
  kMetis,
  // Neurons sorted by activation frequency, descending, cut into groups.
  kFrequency,
  // A seeded shuffle: the baseline a grouping has to beat.
  kRandom,
};

const char* GroupingMethodName(GroupingMethod m);

// How kMetis weighs the tie between neurons i and j (C = co-activation counts,
// f = C's diagonal). Raw counts favour frequent neurons (two unrelated hot
// neurons may co-fire more often than a rare cluster that always fires
// together), which normalised affinities avoid; but on SmolLM2-135M profiles
// and the synthetic one all three give within ~1% of each other's over-fetch
// after swap refinement, and counts are the cheapest, so they are the
// default. bench_grouping prints all three for a new model's profiles.
enum class EdgeAffinity {
  kCount,    // C[i][j]
  kJaccard,  // C[i][j] / (f_i + f_j − C[i][j]) = P(both | either)
  kCosine,   // C[i][j] / sqrt(f_i · f_j)
};

const char* EdgeAffinityName(EdgeAffinity a);

// Returns a permutation of [0, n) in group-major order: group g is
// perm[g*GS .. g*GS+GS). Fails with InvalidArgument unless group_size ≥ 1,
// n % group_size == 0 and n / group_size ≤ kMaxGroupsPerLayer.
// Deterministic for a given (c, group_size, m, seed).
//
// kMetis in detail (w = the EdgeAffinity of C, kCount by default):
//  * Graph: one vertex per neuron; an edge {i, j} for each pair with
//    w(i, j) > 0 among the kMetisNeighbours strongest pairs of i or of j (a
//    k-nearest-neighbour sparsification: the complete graph makes METIS slow
//    and its weakest edges only add noise). Edge weight = w(i, j) scaled
//    linearly so the strongest edge weighs min(kMetisMaxEdgeWeight, 2^30 /
//    adjacency entries), rounded, at least 1. No self loops.
//    Never-active neurons are isolated vertices; METIS places them freely.
//  * METIS_PartGraphKway into n/GS parts (edge-cut objective, seed = `seed`).
//  * Repair: while a part has more than GS neurons, its member with the
//    weakest tie (the least summed w to the rest of the part; ties → higher
//    neuron id) is taken out. The displaced neurons are then placed, most
//    frequent first, each into the under-full part that gains most
//    (summed w to the part's members; ties → the part with the most free
//    slots, then the lowest part index).
//  * Refine: METIS's balance constraint is loose and its cuts are coarse at
//    GS-sized parts, so pairs of neurons in different groups are swapped
//    while a swap raises the summed intra-group w (for each neuron in turn,
//    its best swap; at most kRefineMaxPasses passes, ending early once a
//    pass adds less than 0.1% to the objective). On the synthetic
//    profile of bench_grouping this cuts over-fetch far more than METIS
//    alone does.
//  * Order: groups by summed activation frequency, descending; neurons inside
//    a group by frequency, descending; ties → lower neuron id.
// kFrequency ties → lower neuron id. kRandom: std::mt19937_64(seed) shuffle.
absl::StatusOr<std::vector<int32_t>> GroupNeurons(const Coactivation& c, int group_size,
                                                  GroupingMethod m, uint64_t seed,
                                                  EdgeAffinity affinity = EdgeAffinity::kCount);

// Neighbours kept per neuron in the METIS graph, and the integer scale of its
// edge weights (METIS wants integer weights; 2^16 levels keep the relative
// precision of the counts, and the 2^30 total keeps its 32-bit sums safe).
inline constexpr int kMetisNeighbours = 16;
inline constexpr int kMetisMaxEdgeWeight = 1 << 16;

// Swap refinement stops after this many passes over the neurons (it usually
// ends, by the 0.1% rule, within 10).
inline constexpr int kRefineMaxPasses = 16;

// How a grouping does on held-out tokens, when a touched group is loaded whole.
struct GroupingQuality {
  // Mean over groups of the mean over the group's GS·(GS−1)/2 neuron pairs of
  // P(both active on a held-out token) = C_heldout[i][j] / n_tokens. Higher is
  // better; 0 when GS == 1 or there are no tokens.
  double intra_coactivation = 0;
  // Loaded-but-inactive neurons / loaded neurons, summed over all tokens
  // (a group is loaded whole when any of its neurons is active). Lower is
  // better; 0 when nothing is ever active.
  double overfetch = 0;
  // Mean number of groups with at least one active neuron per token.
  double groups_per_token = 0;
  // Mean number of active neurons per token (independent of the grouping).
  double active_per_token = 0;
};

// `perm` must be a permutation of [0, held_out.n_neurons()) whose size is a
// multiple of group_size (KX_CHECK: a bad permutation is a caller bug).
GroupingQuality EvaluateGrouping(const std::vector<int32_t>& perm, int group_size,
                                 const ActivityMatrix& held_out);

// Checks that `perm` is a permutation of [0, n); InvalidArgument naming the
// first problem otherwise. Used by loaders of stored groupings too.
absl::Status ValidatePermutation(std::span<const int32_t> perm, int n);

namespace internal {
// The repair pass of kMetis on its own (exposed for tests): `part[v]` is
// neuron v's part in [0, n/GS), or −1 for unassigned; returns n/GS groups of
// exactly group_size neurons each, unordered.
std::vector<std::vector<int32_t>> RepairPartition(const Coactivation& c, int group_size,
                                                  const std::vector<int32_t>& part);
}  // namespace internal

}  // namespace kx::sparse
