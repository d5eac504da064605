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
  // What you have: hw (Hardware: nodes, intra_busbw, intra_latency_s, inter_bw,
  // inter_latency_s; bandwidths in bytes/s); link (AlphaBeta: alpha, seconds per message;
  // beta, seconds per byte); std::max, std::min.
  // TODO(task4) BEGIN: chapter §5's effective link: the one (α, β) that describes a ring
  // over all of hw's ranks, a ring that goes at the pace of its slowest hop; on one node
  // the ring never crosses the network (inter_bw may be 0 there). Stuck: tools/hint 09 4
  // (about 6 lines).
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
  // What you have: w (w.bucket_bytes: the buckets' sizes), hw (hw.ranks()),
  // batch_per_rank; out (WhatIf: bottleneck, efficiency, link, step); effective_link(hw)
  // (above); predict_step(w, batch, ranks, link) (task 3); ring_allreduce_seconds(link,
  // bytes, p).
  // TODO(task4) BEGIN: chapter §5's verdict on hw: its link, the step predicted on all of
  // its ranks, the weak-scaling efficiency against the same workload and batch per rank on
  // one rank, and the bottleneck, "compute", "latency" or "bandwidth", by §5's rules (the
  // latency and bandwidth terms are those of §4's ring formula, summed over the buckets).
  // Stuck: tools/hint 09 4 (about 15 lines).
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
