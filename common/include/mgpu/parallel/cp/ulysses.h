/// @file ulysses.h
/// @brief Context parallelism by all-to-all: DeepSpeed-Ulysses (Jacobs et al. 2023,
/// "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long Sequence
/// Transformer Models").
///
/// Rank r of P keeps the queries, keys and values of its own positions of the sequence
/// (sequence_positions, as the ring: T/P positions), for all H heads. One all-to-all per
/// tensor trades positions for heads: afterwards rank r holds the whole sequence for H/P
/// heads, computes ordinary attention over it (the library's block kernel, with the whole
/// sequence as one block), and one all-to-all brings the output back to its positions.
///
///   forward:  Q, K, V in (3 all-to-alls), attention, the output back (1): 4 all-to-alls
///   backward: dO in (1), attention's backward on the kept head-sharded Q, K, V, dQ, dK, dV
///             back (3): 4 all-to-alls
///
/// Layouts (BH = B·H, row b·H + h, as the attention layers order them):
///   sequence-sharded  [B·H, T/P, D]    this rank's positions, every head
///   head-sharded      [B·H/P, T, D]    row b·(H/P) + i is head r·(H/P) + i of batch b; its T
///                                      positions are rank 0's T/P, then rank 1's, ...
///                                      (ulysses_positions: under the plain split simply
///                                      0..T-1, under the zigzag split a permutation of it)
/// Its limit: a rank attends to whole heads, so P must divide H (under tensor parallelism
/// the H/TP heads of a TP rank, so TP·P must divide H).
///
/// Lesson 14 defines the functions of task 5 (lessons/14_context_parallel/ulysses.cpp); the
/// library compiles their reference (solutions/14_context_parallel/).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/attention.h"
#include "mgpu/parallel/cp/ring_attention.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::cp {

/// What a Ulysses forward keeps for its backward, and its output.
struct UlyssesForward {
  Tensor out;               ///< [B·H, T/P, D], sequence-sharded, the inputs' dtype and device
  Tensor q;                 ///< [B·H/P, T, D], head-sharded (the backward's operands)
  Tensor k;                 ///< [B·H/P, T, D], head-sharded
  Tensor v;                 ///< [B·H/P, T, D], head-sharded
  PartialAttention result;  ///< the head-sharded attention's result (f64, host)
  std::int64_t work = 0;    ///< score entries this rank computed (block_attention's count)
};

/// The global positions of the rows of a head-sharded tensor, in order: rank 0's
/// sequence_positions(T, P, 0, split), then rank 1's, ... (T of them).
std::vector<std::int64_t> ulysses_positions(std::int64_t T, int P, Split split);

// ---- Task 5: Ulysses (ulysses.cpp) -------------------------------------------------------------

/// H/P, the heads a rank attends to. Throws one error, "Ulysses: H = <H> heads do not split
/// over P = <P> ranks", naming the fixes, unless P divides H.
std::int64_t heads_per_rank(std::int64_t heads, int P);

/// Sequence-sharded x [B·H, T/P, D] (H = `heads`) -> head-sharded [B·H/P, T, D], in one
/// all_to_all over `group`. Refuses (heads_per_rank's error) before any traffic unless P
/// divides H.
Tensor sequence_to_heads(const Tensor& x, std::int64_t heads, dist::ProcessGroup& group);

/// The inverse: head-sharded y [B·H/P, T, D] -> sequence-sharded [B·H, T/P, D], in one
/// all_to_all over `group`. The same refusal.
Tensor heads_to_sequence(const Tensor& y, std::int64_t heads, dist::ProcessGroup& group);

/// Ulysses' forward over `group`: this rank's q, k, v [B·H, T/P, D] (its positions by
/// `split`); the output equals rows sequence_positions(T, P, rank, split) of full
/// attention over the whole sequence. Exactly 4 all-to-alls, no send.
UlyssesForward ulysses_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         std::int64_t heads, Split split, bool causal,
                                         dist::ProcessGroup& group);

/// Ulysses' backward: dL/dq, dL/dk, dL/dv of this rank's rows [B·H, T/P, D] (the inputs'
/// dtype and device) from dL/d(output) and the forward's kept head-sharded q, k, v and
/// result. Exactly 4 all-to-alls, no send.
nn::AttentionGrads ulysses_attention_backward(const Tensor& dout, const UlyssesForward& fwd,
                                              std::int64_t heads, Split split, bool causal,
                                              dist::ProcessGroup& group);

}  // namespace mgpu::parallel::cp
