// Lesson 09, task 4: alpha and beta of a hardware description, and the model's verdict.
#include <catch2/catch.hpp>

#include "mgpu/perf/time_cost.h"

using namespace mgpu;
using namespace mgpu::perf;

namespace {

Hardware nvlink_node() {  // one node of 8 GPUs: 370 GB/s busbw, 3 us per step
  Hardware h;
  h.name = "8 GPUs, NVLink";
  h.gpus_per_node = 8;
  h.intra_busbw = 370e9;
  h.intra_latency_s = 3e-6;
  return h;
}

Hardware two_nodes() {  // 2 nodes of 4: 100 GB/s inside, 10 GB/s network; 2 and 10 us
  Hardware h;
  h.name = "2x4 GPUs";
  h.nodes = 2;
  h.gpus_per_node = 4;
  h.intra_busbw = 100e9;
  h.intra_latency_s = 2e-6;
  h.inter_bw = 10e9;
  h.inter_latency_s = 10e-6;
  return h;
}

}  // namespace

TEST_CASE("task4: the slowest hop sets alpha and beta", "[09_time_cost][task4][points:2]") {
  const AlphaBeta one = effective_link(nvlink_node());
  CHECK(one.alpha == Approx(3e-6));
  CHECK(one.beta == Approx(1 / 370e9));
  const AlphaBeta two = effective_link(two_nodes());
  CHECK(two.alpha == Approx(10e-6));
  CHECK(two.beta == Approx(1 / 10e9));
  // A network faster than the node's links (and with less latency) does not help.
  Hardware fast_net = two_nodes();
  fast_net.inter_bw = 400e9;
  fast_net.inter_latency_s = 1e-6;
  const AlphaBeta f = effective_link(fast_net);
  CHECK(f.alpha == Approx(2e-6));
  CHECK(f.beta == Approx(1 / 100e9));
  // One node: the network's numbers play no part (none are needed).
  Hardware lone = nvlink_node();
  lone.inter_bw = 1;
  lone.inter_latency_s = 1;
  CHECK(effective_link(lone).beta == Approx(1 / 370e9));
}

TEST_CASE("task4: the what-if on a given table", "[09_time_cost][task4][points:2]") {
  // 10 us forward, 20 us backward per sample, batch 32: forward 0.32 ms, backward 0.64 ms.
  // One bucket of 4 MB ready at the end. On 2x4 GPUs (N = 8, alpha 10 us, 10 GB/s):
  //   2*7*10 us = 140 us latency, 2*7/8 * 4e6 B / 10e9 B/s = 700 us bandwidth: 840 us,
  //   all exposed. Step 0.96 + 0.84 = 1.8 ms; one GPU: 0.96 ms; efficiency 0.5333.
  Workload w;
  w.forward_s_per_sample = 10e-6;
  w.backward_s_per_sample = 20e-6;
  w.bucket_bytes = {4e6};
  w.bucket_ready = {1.0};
  const WhatIf r = what_if(w, two_nodes(), 32);
  CHECK(r.link.beta == Approx(1e-10));
  CHECK(r.step.comm_s == Approx(840e-6));
  CHECK(r.step.exposed_s == Approx(840e-6));
  CHECK(r.step.step_s == Approx(1.8e-3));
  CHECK(r.efficiency == Approx(0.96 / 1.8));
  CHECK(r.step.samples_per_s == Approx(8 * 32 / 1.8e-3));
  CHECK(r.bottleneck == "bandwidth");
}

TEST_CASE("task4: which term dominates where", "[09_time_cost][task4][points:2]") {
  // Many small buckets: 2*7*10 us = 140 us of latency each, 0.175 us of bandwidth.
  Workload small;
  small.forward_s_per_sample = 1e-6;
  small.backward_s_per_sample = 2e-6;
  small.bucket_bytes = std::vector<double>(20, 1000.0);
  small.bucket_ready = std::vector<double>(20, 1.0);
  const WhatIf a = what_if(small, two_nodes(), 32);
  CHECK(a.bottleneck == "latency");
  CHECK(a.step.exposed_s == Approx(20 * (140e-6 + 0.175e-6)));
  // A long backward with the buckets ready early hides everything: compute-bound.
  Workload big = small;
  big.backward_s_per_sample = 1e-3;  // backward 32 ms
  big.bucket_ready = std::vector<double>(20, 0.1);
  const WhatIf b = what_if(big, nvlink_node(), 32);
  CHECK(b.bottleneck == "compute");
  CHECK(b.step.exposed_s == Approx(0).margin(1e-12));
  CHECK(b.efficiency == Approx(1.0));
  // Bad descriptions are refused.
  Hardware no_net = two_nodes();
  no_net.inter_bw = 0;
  CHECK_THROWS_AS(effective_link(no_net), Error);
  Hardware no_gpus = nvlink_node();
  no_gpus.gpus_per_node = 0;
  CHECK_THROWS_AS(what_if(small, no_gpus, 32), Error);
}
