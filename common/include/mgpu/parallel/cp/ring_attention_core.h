/// @file ring_attention_core.h
/// @brief Lesson 14's attention core for a layer: ring attention (or the all-gather-K/V
/// baseline, Ulysses' all-to-alls, or the ring x Ulysses hybrid) over the context-parallel group, each rank holding the
/// queries, keys and values of its own positions (ring_attention.h). Plugged into tp::ParallelSelfAttention,
/// it makes the tensor-parallel layer context-parallel too: the projections split by heads
/// over the TP group, the core over the CP group on those heads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mgpu/dist/process_group.h"
#include "mgpu/parallel/attention_core.h"
#include "mgpu/parallel/cp/hybrid_attention.h"
#include "mgpu/parallel/cp/ring_attention.h"
#include "mgpu/parallel/cp/ulysses.h"

namespace mgpu::parallel::cp {

/// What a core measured: the causal mask's load balance, its memory and its time.
struct CoreStats {
  std::int64_t work = 0;       ///< score entries of its last forward (block_attention's count)
  std::size_t peak = 0;        ///< its largest allocation beyond its inputs in one forward
  double cpu_s = 0;            ///< CPU seconds of the calling thread in its forwards and backwards
  std::size_t carried_peak = 0;  ///< the process's peak it found before measuring its own
  std::size_t kept = 0;        ///< bytes its last training forward keeps for the backward: the
                               ///< tensors it holds (q, k, v or their head-sharded twins, the
                               ///< f64 result and its log-sum-exp)
};

/// Which context-parallel attention a core runs.
enum class CoreKind {
  ring,       ///< ring attention (tasks 3 and 4)
  allgather,  ///< the all-gather-K/V baseline
  ulysses,    ///< Ulysses' all-to-alls (task 5): the whole sequence of H/P heads per rank
  hybrid,     ///< Ulysses over U ranks, the ring across the P/U groups (hybrid_attention.h)
};

/// "ring", "allgather", "ulysses" or "hybrid" (lesson 14's --cp-kind).
const char* core_kind_name(CoreKind kind);

/// Ring attention over `group` (all-gather of K and V with `allgather`; Ulysses with
/// CoreKind::ulysses; the hybrid over its two sub-groups of `group` with CoreKind::hybrid),
/// positions cut by `split`. Keeps q, k, v (Ulysses and the hybrid: their head-sharded
/// twins) and the merged f64 result (never the B·H·T² probabilities).
class RingAttentionCore : public AttentionCore {
 public:
  /// `group` must outlive the core.
  RingAttentionCore(dist::ProcessGroup& group, Split split, bool allgather);
  /// A core of `kind`; Ulysses and the hybrid need `heads`, the heads of q, k, v (B·heads
  /// rows); the hybrid its two groups within `group` (new_hybrid_groups).
  RingAttentionCore(dist::ProcessGroup& group, Split split, CoreKind kind, std::int64_t heads = 0,
                    HybridGroups hybrid = {});
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, bool training) override;
  nn::AttentionGrads backward(const Tensor& grad_y) override;
  std::shared_ptr<AttentionCore> clone() const override;
  std::size_t saved() const override { return saved_.size(); }
  void clear_saved() override { saved_.clear(); }
  std::string describe() const override;
  /// What it measured since it was made (or since reset_stats()).
  const CoreStats& stats() const { return stats_; }
  /// Starts the carried peak again (a step's start); the other counts run on.
  void reset_carried_peak() { stats_.carried_peak = 0; }

 private:
  struct Saved {
    Tensor q, k, v;
    CpForward f;       // its output dropped: the backward needs the f64 result only
    UlyssesForward u;  // Ulysses: the head-sharded q, k, v and result (q, k, v above unset)
    HybridForward h;   // the hybrid: its head-sharded q, k, v and the ring's result
  };
  dist::ProcessGroup* group_;
  Split split_;
  CoreKind kind_;
  std::int64_t heads_;
  HybridGroups hybrid_;
  CoreStats stats_;
  nn::SavedContexts<Saved> saved_;
};

}  // namespace mgpu::parallel::cp
