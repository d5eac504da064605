/// @file link_model.h
/// @brief The alpha-beta model of a link (lesson 04 fits it to measured all-reduces): what
/// the performance model (time_cost.h) charges for communication.
#pragma once

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

}  // namespace mgpu::perf
