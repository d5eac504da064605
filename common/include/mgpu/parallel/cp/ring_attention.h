/// @file ring_attention.h
/// @brief Context parallelism: attention over a sequence split across the ranks of a group,
/// as ring attention does it (Liu et al. 2023, "Ring Attention with Blockwise Transformers
/// for Near-Infinite Context"), each block folded in with the online softmax of
/// FlashAttention (Dao et al. 2022).
///
/// Rank r of P keeps the queries, keys and values of its own positions of the sequence
/// (sequence_positions: one contiguous block, or two chunks under the zigzag split). Its
/// keys and values travel round the ring r -> r+1; every rank folds each block it is
/// handed into its running result (merge_partial), skipping blocks that lie wholly in its
/// queries' future under the causal mask. The backward sends the keys and values round
/// again and the gradients of the keys and values back to their owners.
///
///   forward:  P steps; before step s's compute, K and V of block r-s-1 are already on
///             their way (2 sends per step, 2(P-1) per rank)
///   backward: the same pass of K and V, plus a pass of dK and dV (2(P-1) sends each)
///
/// Every tensor is [BH, T/P, D] per rank (BH = batch x heads). The partial results are kept
/// on the host in f64 whatever the inputs' dtype; what travels is the inputs' dtype on their
/// device (K, V) and f64 (dK, dV).
///
/// Lesson 14 defines the functions of tasks 1-4 (lessons/14_context_parallel/:
/// online_merge.cpp, zigzag_positions.cpp, ring_forward.cpp, ring_backward.cpp); the
/// library compiles their reference (solutions/14_context_parallel/). The block kernels and
/// the all-gather baseline are the library's (common/src/parallel/cp/).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/attention.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::cp {

/// How the T positions of a sequence are dealt to the P ranks.
enum class Split {
  plain,   ///< rank r: positions [r·T/P, (r+1)·T/P)
  zigzag,  ///< rank r: chunks r and 2P-1-r of 2P chunks of T/(2P) (head and tail)
};

/// "plain" or "zigzag".
const char* split_name(Split split);

// ---- Task 1: the online softmax's merge (online_merge.cpp) -------------------------------------

/// Attention of some queries over a subset of the keys: `out` [BH, Tq, D] the softmax-
/// weighted sum over those keys only (normalised over them), `lse` [BH, Tq] the log of the
/// sum of exp(score) over them (-inf where a query saw none of them; its out row is 0).
/// Both f64 on the host.
struct PartialAttention {
  Tensor out;  ///< [BH, Tq, D], f64, host
  Tensor lse;  ///< [BH, Tq], f64, host; -inf: no key seen yet
};

/// The partial result of no keys at all: out 0, lse -inf.
PartialAttention empty_partial(std::int64_t BH, std::int64_t Tq, std::int64_t D);

/// acc <- the attention over the union of acc's keys and part's keys (two disjoint sets).
/// Exact: the result does not depend on how the keys were split nor on the order of the
/// merges, up to rounding. Throws on shapes that differ.
void merge_partial(PartialAttention& acc, const PartialAttention& part);

// ---- Task 2: the positions of a rank (zigzag_positions.cpp) -----------------------------------

/// The global positions of rank `rank`'s rows, ascending: T/P of them. Throws one error,
/// "context parallel: T = ... does not split into ... equal chunks over ... ranks", unless P
/// divides T (plain) or 2P divides T (zigzag).
std::vector<std::int64_t> sequence_positions(std::int64_t T, int P, int rank, Split split);

// ---- The block kernels (common/src/parallel/cp/block_attention.cpp) --------------------------

/// True when every key of `k_pos` lies after every query of `q_pos` under the causal mask:
/// the block contributes nothing and is not computed.
bool block_skipped(const std::vector<std::int64_t>& q_pos, const std::vector<std::int64_t>& k_pos,
                   bool causal);

/// The attention of queries q [BH, Tq, D] at positions q_pos over keys and values k, v
/// [BH, Tk, D] at k_pos: softmax(q kᵀ/√D) v with key j hidden from query i when causal and
/// k_pos[j] > q_pos[i]. Every `chunk` rows of a block are a chunk (0: the block is one); a
/// chunk pair wholly in the future is not computed. `work`, when given, is increased by the
/// score entries computed (query x key pairs of the chunk pairs computed).
PartialAttention block_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const std::vector<std::int64_t>& q_pos,
                                 const std::vector<std::int64_t>& k_pos, bool causal,
                                 std::int64_t chunk = 0, std::int64_t* work = nullptr);

/// The rows of a chunk under `split`: T/P (plain), T/(2P) (zigzag).
std::int64_t chunk_rows(std::int64_t T, int P, Split split);

/// The backward of one block given the final (merged) forward result `fwd` of these
/// queries: adds this block's part of dL/dq to `dq` and its dL/dk, dL/dv to `dk`, `dv`
/// (f64 host tensors [BH, Tq, D] and [BH, Tk, D]). dout = dL/d(output) [BH, Tq, D]; the
/// chunk pairs block_attention skips are skipped here too.
void block_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const std::vector<std::int64_t>& q_pos,
                              const std::vector<std::int64_t>& k_pos,
                              const PartialAttention& fwd, bool causal, std::int64_t chunk,
                              Tensor& dq, Tensor& dk, Tensor& dv);

/// A zero f64 host tensor shaped as `like`.
Tensor zeros_f64(const Tensor& like);

// ---- Tasks 3 and 4: the ring (ring_forward.cpp, ring_backward.cpp) ---------------------------

/// What a context-parallel forward keeps for its backward, and its output.
struct CpForward {
  Tensor out;                ///< [BH, T/P, D], the inputs' dtype and device
  PartialAttention result;   ///< the merged result (f64, host), for the backward
  std::int64_t work = 0;     ///< score entries this rank computed (block_attention's count)
};

/// Throws, naming `op`, unless q, k, v are [BH, T/P, D] alike.
void check_cp_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v);

/// Ring attention's forward over `group`: this rank's q, k, v (its positions by `split`,
/// T = P·q.size(1)); the output equals rows sequence_positions(T, P, rank, split) of full
/// attention over the whole sequence. 2(P-1) sends per rank (K and V, P-1 times each),
/// each posted before the compute of the block in hand.
CpForward ring_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 Split split, bool causal, dist::ProcessGroup& group);

/// Ring attention's backward: dL/dq, dL/dk, dL/dv of this rank's rows (the inputs' dtype
/// and device) from dL/d(output) and the forward's result. K and V travel round once more
/// (2(P-1) sends); the gradients of each block's K and V are gathered on their way round
/// and reach their owner last (2(P-1) sends).
nn::AttentionGrads ring_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const CpForward& fwd, Split split,
                                           bool causal, dist::ProcessGroup& group);

/// The tags of the ring's messages: K, V forward and backward, and the dK, dV pass.
enum RingTag : int {
  kTagK = 40,   ///< a block of keys
  kTagV = 41,   ///< a block of values
  kTagDK = 42,  ///< a block's key gradients on their way home
  kTagDV = 43,  ///< a block's value gradients on their way home
};

// ---- The all-gather baseline (common/src/parallel/cp/allgather_attention.cpp) ----------------

/// The baseline Llama 3 describes ("The Llama 3 Herd of Models", 2024): all-gather the whole
/// K and V (2 collectives), compute this rank's queries against them locally. Same result
/// as ring_attention_forward; keeps 2·BH·T·D values of K and V per rank instead of 4·BH·T/P·D.
CpForward allgather_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      Split split, bool causal, dist::ProcessGroup& group);
/// Its backward: all-gathers K and V again, computes dK and dV of the whole sequence and
/// reduce-scatters them to their owners (2 all-gathers, 2 reduce-scatters).
nn::AttentionGrads allgather_attention_backward(const Tensor& dout, const Tensor& q,
                                                const Tensor& k, const Tensor& v,
                                                const CpForward& fwd, Split split, bool causal,
                                                dist::ProcessGroup& group);

/// The score entries rank `rank` computes in a causal forward under `split` (chunk pairs
/// not skipped, times their area): plain (r+1)·(T/P)², zigzag (2P+1)·(T/2P)² on every rank.
std::int64_t causal_work(std::int64_t T, int P, int rank, Split split);

}  // namespace mgpu::parallel::cp
