// What the planner's tests share: a machine described by its links alone.
#pragma once

#include "mgpu/perf/time_cost.h"

namespace mgpu::testing {

/// `nodes` machines of `gpus_per_node` GPUs: inside a node, an all-reduce bus bandwidth
/// (bytes/s) and one ring step's latency (s); between nodes, each node's network bandwidth
/// and one step's latency (unused on one node).
inline perf::Hardware test_hardware(int nodes, int gpus_per_node, double intra_busbw,
                                    double intra_latency_s, double inter_bw = 0,
                                    double inter_latency_s = 0, const char* name = "test") {
  return perf::Hardware{name,           nodes,    gpus_per_node,  intra_busbw,
                        intra_latency_s, inter_bw, inter_latency_s};
}

}  // namespace mgpu::testing
