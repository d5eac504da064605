/// @file link_model.h
/// @brief The alpha-beta model of a link: what the performance model (time_cost.h) charges
/// for communication. ring_allreduce_seconds and
/// alltoall_seconds are the library's (link_model.cpp);
/// fit_alpha_beta is lesson 04's task 4 (lessons/04_collectives/alpha_beta.cpp), and the
/// library compiles its reference (solutions/04_collectives/).
#pragma once

#include <vector>

namespace mgpu::perf {

/// The alpha-beta model of one message: sending n bytes costs alpha + n * beta.
struct AlphaBeta {
  double alpha = 0;  ///< latency per message, seconds
  double beta = 0;   ///< seconds per byte (1 / bandwidth)
  /// The bandwidth 1 / beta in GB/s (0 for beta = 0).
  double bandwidth_gbs() const { return beta > 0 ? 1e-9 / beta : 0; }
};

/// The ring all-reduce time the model predicts for `bytes` bytes on `p` ranks:
/// T = 2(p-1) alpha + 2 (p-1)/p n beta (0 on one rank).
double ring_allreduce_seconds(const AlphaBeta& model, double bytes, int p);

/// The pairwise all-to-all's time (lesson 04) for a buffer of `bytes` bytes on each of `p`
/// ranks, a 1/p block of it to every rank: p-1 messages of n/p bytes leave each rank,
/// T = (p-1) alpha + (p-1)/p n beta (0 on one rank). Expert parallelism's dispatch and
/// combine (lesson 16) are such exchanges.
double alltoall_seconds(const AlphaBeta& model, double bytes, int p);

/// One measurement: an all-reduce of `bytes` bytes took `seconds`.
struct AllReduceTiming {
  double bytes = 0;    ///< the all-reduced size, bytes
  double seconds = 0;  ///< how long it took, seconds
};

/// Lesson 04, task 4. alpha and beta that make ring_allreduce_seconds fit `timings` (p
/// ranks) best in the least-squares sense of *relative* error: minimize
/// sum_i ((T_i - model_i) / T_i)^2. Throws mgpu::Error for p < 2, a time that is not
/// positive, or fewer than two distinct sizes.
AlphaBeta fit_alpha_beta(const std::vector<AllReduceTiming>& timings, int p);

}  // namespace mgpu::perf
