// Lesson 09, task 4: what the model says about hardware we do not have.
//
// A ring over the GPUs of several nodes passes through every node's network card; each
// step of the ring moves a chunk over every hop at the same time and ends when the slowest
// hop is done. So one number for the bandwidth and one for the latency describe the
// whole ring: those of its slowest hop. Then task 3 does the rest.
#include <algorithm>

#include "mgpu/perf/time_cost.h"

namespace mgpu::perf {

AlphaBeta effective_link(const Hardware& hw) {
  MGPU_CHECK(hw.nodes >= 1 && hw.gpus_per_node >= 1, "effective_link: '", hw.name, "' has ",
             hw.nodes, " node(s) of ", hw.gpus_per_node, " GPU(s); both must be >= 1");
  MGPU_CHECK(hw.intra_busbw > 0, "effective_link: '", hw.name,
             "' needs the bus bandwidth inside a node (intra_busbw > 0)");
  MGPU_CHECK(hw.nodes == 1 || hw.inter_bw > 0, "effective_link: '", hw.name, "' has ",
             hw.nodes, " nodes but no network bandwidth (inter_bw > 0)");
  AlphaBeta link;
  // TODO(task4) BEGIN: one node: the node's latency and 1 / its bus bandwidth. Several
  // nodes: the larger of the two latencies, and 1 / the smaller of the two bandwidths.
  // (about 6 lines)
  if (hw.nodes == 1) {
    link.alpha = hw.intra_latency_s;
    link.beta = 1.0 / hw.intra_busbw;
  } else {
    link.alpha = std::max(hw.intra_latency_s, hw.inter_latency_s);
    link.beta = 1.0 / std::min(hw.intra_busbw, hw.inter_bw);
  }
  // TODO(task4) END
  return link;
}

WhatIf what_if(const Workload& w, const Hardware& hw, std::int64_t batch_per_rank) {
  WhatIf out;
  // TODO(task4) BEGIN: link, step (hw.ranks() ranks) and the one-rank step; efficiency =
  // one-rank step_s / step_s. Then the bottleneck: "compute" if exposed_s < 0.05 step_s,
  // else compare the sum over buckets of 2(N-1) alpha with the sum of 2(N-1)/N bytes beta:
  // "latency" if the first is larger, "bandwidth" otherwise. (about 15 lines)
  out.link = effective_link(hw);
  const int n = hw.ranks();
  out.step = predict_step(w, batch_per_rank, n, out.link);
  const StepPrediction one = predict_step(w, batch_per_rank, 1, out.link);
  out.efficiency = one.step_s / out.step.step_s;
  double latency = 0, bandwidth = 0;
  for (double bytes : w.bucket_bytes) {
    latency += 2.0 * (n - 1) * out.link.alpha;
    bandwidth += 2.0 * (n - 1) / n * bytes * out.link.beta;
  }
  if (out.step.exposed_s < 0.05 * out.step.step_s) {
    out.bottleneck = "compute";
  } else {
    out.bottleneck = latency > bandwidth ? "latency" : "bandwidth";
  }
  // TODO(task4) END
  return out;
}

}  // namespace mgpu::perf
