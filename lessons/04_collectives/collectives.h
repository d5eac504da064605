/// @file collectives.h
/// @brief Lesson 04's contract: ring all-reduce built from send and recv, and the alpha-beta
/// cost model fitted to measurements. The graded tests compile against exactly these
/// declarations.
///
///   task 1  ring_reduce_scatter  (ring_reduce_scatter.cpp)  p-1 steps: pass a chunk right, add the one from the left
///   task 2  ring_all_gather      (ring_all_gather.cpp)      p-1 steps: pass the finished chunks around
///   task 3  ring_all_reduce      (ring_all_reduce.cpp)      the two, one after the other
///   task 4  fit_alpha_beta       (alpha_beta.cpp)           least squares on (bytes, seconds)
///
/// The ring functions use only ProcessGroup::send and ProcessGroup::recv (the tests hand
/// them a group that counts the messages and refuses every collective).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/perf/link_model.h"
#include "mgpu/tensor.h"

namespace mgpu::lesson04 {

using dist::ProcessGroup;
using dist::Work;  // what send and recv return: wait() blocks until the message is through

// ---- Provided (collectives_support.cpp) ------------------------------------------------------

/// The elements [begin, end) of chunk i when n elements are cut into p chunks: the first
/// n % p chunks get one element more, so sizes differ by at most one and chunk 0 is never
/// smaller than another. Example: n = 10, p = 4 -> [0,3) [3,6) [6,8) [8,10).
struct Range {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
Range chunk_range(std::int64_t n, int p, int i);

/// Chunk i of `flat` (a 1-D tensor) as a view: writing into it writes into `flat`.
/// i is taken modulo p, so chunk(flat, p, rank - 1) is fine for rank 0 too.
Tensor chunk(const Tensor& flat, int p, int i);

/// dst += src, elementwise, for same-shaped tensors of any dtype on the CPU (floating
/// dtypes also on CUDA). The reduction step of the ring.
void add_into(const Tensor& dst, const Tensor& src);

// ---- Tasks 1-3: the ring (ring_reduce_scatter.cpp, ring_all_gather.cpp, ring_all_reduce.cpp) -

/// Task 1. In place. On entry every rank holds its own `data` (same shape and dtype on
/// every rank); on return, chunk r (chunk_range(data.numel(), p, r)) of rank r's data holds
/// the sum of all ranks' chunk r. The other chunks hold partial sums (unspecified).
/// Each rank sends exactly p-1 chunks: at step s it sends chunk r-s-1 to rank r+1 and adds
/// the chunk r-s-2 it receives from rank r-1 (all indices modulo p).
void ring_reduce_scatter(ProcessGroup& pg, const Tensor& data);

/// Task 2. In place. On entry chunk r of rank r's data is final; on return every chunk of
/// every rank's data is (each rank's chunk r copied everywhere). Each rank sends exactly p-1
/// chunks: at step s it sends chunk r-s and receives chunk r-s-1.
void ring_all_gather(ProcessGroup& pg, const Tensor& data);

/// Task 3. In place: every rank's data becomes the elementwise sum over all ranks, with
/// 2(p-1) chunks sent per rank: reduce-scatter, then all-gather.
void ring_all_reduce(ProcessGroup& pg, const Tensor& data);

// ---- Task 4: the alpha-beta model (alpha_beta.cpp) ------------------------------------------------

/// One measurement: an all-reduce of `bytes` bytes took `seconds`.
struct Timing {
  double bytes = 0;
  double seconds = 0;
};

/// The alpha-beta model of one message: sending n bytes costs alpha + n * beta (alpha,
/// seconds per message; beta, seconds per byte; bandwidth_gbs() = 1 / beta in GB/s). The
/// library's (mgpu/perf/link_model.h), which lesson 09's performance model charges for
/// communication.
using perf::AlphaBeta;

/// Provided by the library: the ring all-reduce time the model predicts for n bytes on p
/// ranks: T = 2(p-1) alpha + 2 (p-1)/p n beta.
using perf::ring_allreduce_seconds;

/// Task 4. alpha and beta that make ring_allreduce_seconds fit `timings` (p ranks) best in
/// the least-squares sense of *relative* error: minimize sum_i ((T_i - model_i) / T_i)^2.
/// Throws mgpu::Error for p < 2 or fewer than two distinct sizes.
AlphaBeta fit_alpha_beta(const std::vector<Timing>& timings, int p);

}  // namespace mgpu::lesson04
