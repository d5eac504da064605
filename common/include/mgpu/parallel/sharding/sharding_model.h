/// @file sharding_model.h
/// @brief What sharded data parallelism should cost: memory per rank and bytes sent per
/// step, from the units' sizes alone (the formulas lesson 10 measures against).
///
/// Memory per rank, Ψ = parameter elements (padded), N ranks, c = bytes of the compute
/// dtype (4 for f32, 2 for bf16/f16), m = 4 when c < 4 (a separate fp32 master shard):
///
///   stage            parameters       gradients      AdamW moments    fp32, c = 4   bf16, c = 2
///   0 (DDP)          4Ψ               4Ψ (+4Ψ)       8Ψ               16 (20)       16 (20)
///   1 (optimizer)    cΨ + mΨ/N        cΨ + 4Ψ/N      8Ψ/N             8 + 12/N      4 + 16/N
///   2 (+gradients)   cΨ + mΨ/N        4Ψ/N           8Ψ/N             4 + 12/N      2 + 16/N
///   3 (+parameters)  4Ψ/N             4Ψ/N           8Ψ/N             16/N          16/N
///
/// (bytes per parameter in the last two columns). DDP's (+4Ψ) is its bucket buffers when
/// the gradients are not views of them (gradient_as_bucket_view off, PyTorch's default);
/// DDP under lesson 08's autocast keeps fp32 weights and gradients, hence 16 either way.
/// The 4Ψ/N of gradients at stages 1-3 is the master shard's fp32 gradient, where the
/// averaged gradient accumulates (as FSDP keeps it; the ZeRO paper counts 2 bytes).
///
/// A step also holds a working set on top: at stage 2 the unreduced gradients of the unit
/// being computed and of the one being reduce-scattered (2 units × c bytes per element),
/// at stage 3 the gathered parameters of the unit being computed and of the one prefetched
/// on top of that (2 more units × c). predict_memory() walks the schedule unit by unit.
///
/// Communication, per rank per step, as a ring sends it (lesson 04): an all-reduce of M
/// bytes sends 2(N-1)/N·M in 2(N-1) messages, a reduce-scatter or an all-gather
/// (N-1)/N·M in N-1 messages. DDP: one all-reduce of the gradients (2Ψc(N-1)/N);
/// stage 1: the same plus an all-gather of the parameters (3Ψc(N-1)/N); stage 2: a
/// reduce-scatter and an all-gather (2Ψc(N-1)/N, DDP's volume); stage 3: an all-gather
/// in forward, one in backward, a reduce-scatter (3Ψc(N-1)/N, 1.5x DDP).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/dtype.h"

namespace mgpu::parallel {

/// Bytes per rank that training keeps, and the most a step holds on top.
struct MemoryPrediction {
  double params = 0;           ///< parameters kept between steps (full copies, master shards)
  double grads = 0;            ///< gradients kept between steps
  double optimizer_state = 0;  ///< AdamW's two moments
  double working_set = 0;      ///< the most gathered parameters and unreduced gradients at once
  /// What stays between steps.
  double persistent() const { return params + grads + optimizer_state; }
  /// The most at any moment of a step (activations not included).
  double peak() const { return persistent() + working_set; }
};

/// The bytes per parameter of the table above: stage 0 (DDP, with `ddp_bucket_copy` its
/// separate bucket buffers) to 3, on `world` ranks, computing in `compute_dtype`.
double bytes_per_parameter(int stage, int world, DType compute_dtype, bool ddp_bucket_copy = false);

/// One unit as the formulas see it.
struct UnitShape {
  std::int64_t numel = 0;             ///< its padded number of parameter elements
  DType compute_dtype = DType::f32;   ///< the dtype it gathers and computes in
};

/// The memory of a sharded model with `units` (forward order) at `stage` (1-3) on `world`
/// ranks: the table's persistent part, and the working set of the schedule
/// ShardedDataParallel runs (with or without prefetching). Throws for a stage outside 1-3.
MemoryPrediction predict_memory(int stage, const std::vector<UnitShape>& units, int world,
                                bool prefetch = true);
/// The same for units of `unit_numel` elements all computing in `compute_dtype`; stage 0 is
/// DDP (computing in f32 or under autocast; with `ddp_bucket_copy` its bucket buffers).
MemoryPrediction predict_memory(int stage, const std::vector<std::int64_t>& unit_numel, int world,
                                DType compute_dtype, bool prefetch = true,
                                bool ddp_bucket_copy = false);

/// Communication of one training step on one rank.
struct CommPrediction {
  double bytes_sent = 0;  ///< bytes this rank sends (ring algorithms)
  double messages = 0;    ///< messages this rank sends, each paying the latency alpha
  /// alpha-beta time of it all, with no overlap: messages·alpha + bytes_sent·beta.
  double seconds(double alpha, double beta) const { return messages * alpha + bytes_sent * beta; }
};

/// Bytes one rank sends in a ring `op` ("all-reduce", "reduce-scatter", "all-gather")
/// over a buffer of `bytes` on `world` ranks. Throws for an unknown op.
double ring_bytes_sent(const std::string& op, double bytes, int world);
/// Messages one rank sends in that ring op: 2(N-1) for an all-reduce, N-1 otherwise.
double ring_messages(const std::string& op, int world);

/// The collectives of one step at `stage` (0 = DDP: one all-reduce per unit as a bucket)
/// for units of `unit_numel` elements, in `compute_dtype`, on `world` ranks.
CommPrediction predict_comm(int stage, const std::vector<std::int64_t>& unit_numel, int world,
                            DType compute_dtype);

}  // namespace mgpu::parallel
