/// @file hybrid_attention.h
/// @brief Two-dimensional context parallelism: Ulysses inside, the ring across (USP, Fang and
/// Zhao 2024, "USP: A Unified Sequence Parallelism Approach for Long Context Generative AI";
/// LoongTrain, Gu et al. 2024).
///
/// The CP group of P = U·R ranks is cut two ways. CP ranks g·U .. g·U+U-1 (consecutive: on
/// one node, where an all-to-all is cheap) form Ulysses group g; the ranks with the same
/// place j in every Ulysses group (j, U+j, 2U+j, ...) form ring group j.
///
///   P = 4, U = 2, R = 2:  Ulysses groups {0,1} {2,3};  ring groups {0,2} {1,3}
///
/// Forward on CP rank p = g·U + j, holding its positions of every head [B·H, T/P, D]:
///   1. Ulysses' all-to-all over its Ulysses group (sequence_to_heads): the positions of
///      the group's U ranks for H/U heads, [B·H/U, T/R, D];
///   2. those rows put in ascending order of position: then they are exactly what ring rank
///      g of R holds under the same split (sequence_positions(T, R, g, split)), so
///   3. ring attention over the ring group (ring_attention_forward, R ranks) on those heads;
///   4. the output back to the rank's positions (heads_to_sequence).
/// The backward mirrors it (dO in, ring_attention_backward, dQ, dK, dV back).
///
///   per rank and layer: 4 all-to-alls of B·H·T/P·D values forward, 4 backward (over U
///   ranks); 2(R-1) ring sends of B·(H/U)·(T/R)·D values forward, 4(R-1) backward.
///   U = P is Ulysses (a ring of one), U = 1 is the ring (an all-to-all of one).
///
/// The functions of lesson 14 it composes (sequence_to_heads, heads_to_sequence,
/// ring_attention_forward and _backward, sequence_positions) are the lesson's; this file
/// only wires them together. H must be a multiple of U (heads_per_rank's refusal).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/attention.h"
#include "mgpu/parallel/cp/ring_attention.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::cp {

/// A rank's two groups of the hybrid: its Ulysses group (U ranks) and its ring group (R).
struct HybridGroups {
  std::shared_ptr<dist::ProcessGroup> ulysses;  ///< CP ranks g·U .. g·U+U-1
  std::shared_ptr<dist::ProcessGroup> ring;     ///< CP ranks j, U+j, 2U+j, ...
  int U = 1;  ///< ranks of a Ulysses group (heads split U ways)
  int R = 1;  ///< ranks of a ring group (the Ulysses groups a ring connects)
};

/// The Ulysses size used when none is asked for: the largest U below P that divides both
/// P and `heads` (so the hybrid is two-dimensional wherever it can be), 1 when none does
/// (P prime, or 1).
int default_ulysses_size(int P, std::int64_t heads);

/// Creates the hybrid's groups of every CP group in `cp_groups` (world ranks, each listed
/// in CP-rank order), Ulysses groups first, and returns this rank's two (null members
/// where this rank is in none of `cp_groups`). Collective over the world: every rank calls
/// it with the same lists (dist::new_group). Throws unless U divides each group's size.
HybridGroups new_hybrid_groups(const std::vector<std::vector<int>>& cp_groups, int U,
                               const std::string& backend = "mpi",
                               const Device& device = Device::cpu(),
                               const dist::GroupOptions& options = {});

/// What a hybrid forward keeps for its backward, and its output.
struct HybridForward {
  Tensor out;         ///< [B·H, T/P, D], sequence-sharded, the inputs' dtype and device
  Tensor q;           ///< [B·H/U, T/R, D], this ring rank's rows in ascending position order
  Tensor k;           ///< the keys, as q
  Tensor v;           ///< the values, as q
  CpForward ring;     ///< the ring's result (its output dropped)
  std::int64_t work = 0;  ///< score entries this rank computed
};

/// The hybrid's forward: this rank's q, k, v [B·H, T/P, D] (its positions by `split` among
/// the P = U·R CP ranks, CP rank = ulysses.rank() + U·ring.rank()). The output equals rows
/// sequence_positions(T, P, rank, split) of full attention. 4 all-to-alls, 2(R-1) sends.
HybridForward hybrid_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       std::int64_t heads, Split split, bool causal,
                                       const HybridGroups& groups);

/// Its backward: dL/dq, dL/dk, dL/dv of this rank's rows. 4 all-to-alls, 4(R-1) sends.
nn::AttentionGrads hybrid_attention_backward(const Tensor& dout, const HybridForward& fwd,
                                             std::int64_t heads, Split split, bool causal,
                                             const HybridGroups& groups);

}  // namespace mgpu::parallel::cp
