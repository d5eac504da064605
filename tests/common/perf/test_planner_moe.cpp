// mgpu::perf's planner with mixtures of experts (mgpu/perf/moe_model.h, model_presets.h): the
// presets' parameters against their papers, memory per rank with EP against a hand count,
// the all-to-all against lesson 04's (P-1)α + (P-1)/P·n·β inside and across nodes, EP's
// groups that span nodes paying the network, the experts' FLOPs counted for k, not E.
#include <catch2/catch.hpp>

#include <cmath>

#include "expect_error.h"
#include "mgpu/perf/model_presets.h"
#include "mgpu/perf/planner.h"
#include "perf_test_util.h"

namespace perf = mgpu::perf;
using mgpu::testing::test_hardware;

namespace {

bool close_to(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

double relative(double got, double want) { return std::abs(got - want) / want; }

// 2 nodes of 4 GPUs: 100 GB/s and 5 us inside a node, 100 GB/s per node and 10 us between.
perf::Hardware two_nodes() { return test_hardware(2, 4, 100e9, 5e-6, 100e9, 10e-6); }

}  // namespace

TEST_CASE("MoE presets: Mixtral 8x7B and DeepSeek-V3's parameters, all and active, as published",
          "[perf][planner][moe]") {
  // Mistral AI's "Mixtral of experts" announcement: 46.7B parameters, 12.9B active per
  // token (the paper, "Mixtral of Experts", rounds to 47B and 13B).
  const perf::ModelShape mixtral = perf::model_preset("mixtral-8x7b");
  CHECK(relative(static_cast<double>(mixtral.parameters()), 46.7e9) < 0.01);
  CHECK(relative(static_cast<double>(mixtral.active_parameters()), 12.9e9) < 0.01);
  // "DeepSeek-V3 Technical Report": 671B parameters, 37B activated per token. Counted as
  // Mixtral's 12.9B are (both embedding tables, the shared expert, 8 routed), the shape
  // gives 37.55B: the report rounds to 37B, 1.5% below.
  const perf::ModelShape ds = perf::model_preset("deepseek-v3-like");
  CHECK(relative(static_cast<double>(ds.parameters()), 671e9) < 0.01);
  CHECK(relative(static_cast<double>(ds.active_parameters()), 37e9) < 0.016);
  CHECK(relative(static_cast<double>(ds.active_parameters()), 37.55e9) < 0.001);
  // The 3 dense layers and 58 of 256 + 1 experts, by hand: the active count is the total
  // less 248 routed experts in each MoE layer.
  const double expert = 3.0 * 7168 * 2048;
  CHECK(close_to(static_cast<double>(ds.parameters() - ds.active_parameters()), 58 * 248 * expert));
  CHECK(perf::moe_layers_in(ds, 0, ds.n_layer) == 58);
  // A dense model: all parameters active; gpt-tiny's count unchanged.
  const perf::ModelShape tiny = perf::model_preset("tiny");
  CHECK(tiny.parameters() == tiny.active_parameters());
  CHECK(mgpu::testing::contains(mgpu::testing::error_of([] { perf::model_preset("gpt-5"); }),
                                "no model preset 'gpt-5'"));
}

TEST_CASE("MoE memory per rank: experts / EP, their states sharded over the expert-data group",
          "[perf][planner][moe]") {
  // gpt-tiny-moe: C = 128, V = 65, 128 positions, 4 blocks, blocks 1 and 3 MoE of 4 experts.
  const perf::ModelShape m = perf::model_preset("gpt-tiny-moe");
  CHECK(perf::is_moe_layer(m, 1));
  CHECK(perf::is_moe_layer(m, 3));
  CHECK_FALSE(perf::is_moe_layer(m, 0));
  CHECK_FALSE(perf::is_moe_layer(m, 2));
  // By hand. Dense: tables 65·128 + 128·128 = 24704, ln_f 256, 4 attentions 4C² + 4C =
  // 66048 and 4 pairs of LayerNorms 512, 2 dense MLPs 8C² + 5C = 131712, 2 routers E·C = 512.
  const double dense = 24704 + 256 + 4 * (66048 + 512) + 2 * 131712 + 2 * 512;
  const double experts = 2 * 4 * 131712.0;  // 2 MoE blocks x 4 experts, each a GPT MLP
  CHECK(close_to(dense, 555648));
  CHECK(close_to(static_cast<double>(m.parameters()), dense + experts));
  perf::JobSettings job;  // fp32, ZeRO-1
  job.global_batch = 8;
  const perf::Layout l{4, 1, 1, 2};  // DP4 (EP2): 2 experts a rank, expert-data groups of 2
  CHECK(l.str() == "DP4 (EP2) x TP1 x PP1");
  CHECK(close_to(perf::stage_parameters(m, l, 0), dense));
  CHECK(close_to(perf::stage_expert_parameters(m, l, 0), experts / 2));
  const perf::MemoryEstimate e = perf::estimate_memory(m, job, l);
  CHECK(close_to(e.parameters, 4 * dense + 4 * experts / 2));
  CHECK(close_to(e.gradients, 4 * dense + 4 * experts / 2));
  CHECK(close_to(e.optimizer, 8 * dense / 4 + 8 * (experts / 2) / 2));  // ZeRO-1 over 4 and 2
  // ZeRO-3: the experts' weights sharded over 2 (DP / EP), the dense over 4.
  job.zero_stage = 3;
  CHECK(close_to(perf::estimate_memory(m, job, l).parameters,
                 4 * dense / 4 + 4 * (experts / 2) / 2));
  // Candidates: EP divides DP and the experts (4): DP4 gives EP 1, 2 and 4.
  int with_ep = 0;
  for (const perf::Layout& c : perf::candidate_layouts(4, m, perf::JobSettings{}))
    if (c.dp == 4) {
      CHECK(4 % c.ep == 0);
      ++with_ep;
    }
  CHECK(with_ep == 3);
}

TEST_CASE("all-to-all: (P-1)α + (P-1)/P·n·β inside a node, the network's share across nodes",
          "[perf][planner][moe]") {
  const perf::Hardware hw = two_nodes();
  const double n = 1e6;
  CHECK(close_to(perf::alltoall_seconds(perf::AlphaBeta{5e-6, 1e-11}, n, 4),
                 3 * 5e-6 + 0.75 * n * 1e-11));
  CHECK(perf::alltoall_seconds(perf::AlphaBeta{5e-6, 1e-11}, n, 1) == 0);
  // 4 ranks inside a node: lesson 04's formula with the node's link.
  CHECK(close_to(perf::group_alltoall_seconds(hw, n, 4, 1),
                 perf::alltoall_seconds(perf::AlphaBeta{5e-6, 1 / 100e9}, n, 4)));
  // 2 ranks 4 apart: one on each node, the one message over the network at one GPU's share
  // (100 GB/s / 4 GPUs): (P-1)α_inter + (P-1)/P·n·β_gpu.
  CHECK(close_to(perf::group_alltoall_seconds(hw, n, 2, 4),
                 perf::alltoall_seconds(perf::AlphaBeta{10e-6, 4 / 100e9}, n, 2)));
  // All 8: 3 of the 7 messages stay in the node, 4 cross the network.
  CHECK(close_to(perf::group_alltoall_seconds(hw, n, 8, 1),
                 7 * 10e-6 + n / 8 * (3 / 100e9 + 4 * 4 / 100e9)));
  CHECK(perf::group_alltoall_seconds(hw, n, 1, 1) == 0);
}

TEST_CASE("EP's all-to-alls in the step: a group across nodes pays the network; k experts' FLOPs",
          "[perf][planner][moe]") {
  const perf::ModelShape m = perf::model_preset("gpt-tiny-moe");
  perf::Cluster c;
  c.hardware = two_nodes();
  c.flops = 1e12;
  perf::JobSettings job;
  job.global_batch = 8;
  const double N = 128, C = 128, w = 4, k = 2, micro = 2;  // DP4: 2 micro-batches of 1 sequence
  // 4 all-to-alls per MoE block (2 blocks) and micro-batch, k·N·C·w bytes each on a rank.
  const auto ep_time = [&](int size, int stride) {
    return micro * 2 * 4 * perf::group_alltoall_seconds(c.hardware, k * N * C * w, size, stride);
  };
  // DP4 x TP2: the replicas 2 apart. EP2 stays in a node; EP4 spans the two.
  const perf::TimeEstimate inside = perf::estimate_time(m, job, c, perf::Layout{4, 2, 1, 2});
  const perf::TimeEstimate across = perf::estimate_time(m, job, c, perf::Layout{4, 2, 1, 4});
  CHECK(close_to(inside.ep_comm_s, ep_time(2, 2)));
  CHECK(close_to(inside.ep_comm_s,
                 micro * 8 * perf::alltoall_seconds(perf::AlphaBeta{5e-6, 1 / 100e9}, k * N * C * w, 2)));
  CHECK(close_to(across.ep_comm_s,
                 micro * 8 * (3 * 10e-6 + k * N * C * w / 4 * (1 / 100e9 + 2 * 4 / 100e9))));
  CHECK(across.ep_comm_s > 2 * inside.ep_comm_s);
  CHECK(perf::estimate_time(m, job, c, perf::Layout{4, 2, 1, 1}).ep_comm_s == 0);
  // Compute counts k experts a token, not E: 60 more experts add their routers' E·C alone.
  perf::ModelShape more = m;
  more.moe.experts = 64;
  const perf::Layout l{4, 2, 1, 2};
  const double router_flops = 3 * 2 * (64 - 4) * C * 2 /*MoE blocks*/ / 2 /*tp*/ * N * micro;
  const double extra =
      perf::estimate_time(more, job, c, l).compute_s - perf::estimate_time(m, job, c, l).compute_s;
  CHECK(close_to(extra, router_flops / c.flops));
}

TEST_CASE("DeepSeek-V3-like on 2,048 GPUs: the report's layout by hand, EP layouts that fit",
          "[perf][planner][moe]") {
  const perf::ModelShape ds = perf::model_preset("deepseek-v3-like");
  const double expert = 3.0 * 7168 * 2048;
  // PP16 x EP64 (DP128): 61 blocks, the first 13 stages 4 blocks. Stage 0 holds blocks 0-3
  // (one MoE), stage 1 blocks 4-7 (four): 256/64 = 4 experts of each on a rank.
  const perf::Layout report{128, 1, 16, 64};
  CHECK(report.str() == "DP128 (EP64) x TP1 x PP16");
  CHECK(close_to(perf::stage_expert_parameters(ds, report, 0), 1 * 4 * expert));
  CHECK(close_to(perf::stage_expert_parameters(ds, report, 1), 4 * 4 * expert));
  // 8 nodes of 8, 400 Gb/s a GPU, 80 GiB, bf16, flash attention, full recomputation.
  perf::Cluster c;
  c.hardware.nodes = 256;
  c.hardware.gpus_per_node = 8;
  c.hardware.intra_busbw = 370e9;
  c.hardware.intra_latency_s = 3e-6;
  c.hardware.inter_bw = 8 * 50e9;
  c.hardware.inter_latency_s = 8e-6;
  c.flops = 400e12;
  c.memory_bytes = 80.0 * (1ull << 30);
  perf::JobSettings job;
  job.global_batch = 15360;
  job.precision.name = "bf16";
  job.flash_attention = true;
  job.recompute = "full";
  int fitting_with_ep = 0;
  for (const perf::PlanEntry& e : perf::plan_layouts(ds, job, c))
    if (e.fits && e.layout.ep > 1) ++fitting_with_ep;
  CHECK(fitting_with_ep > 0);
  // The report's EP group spans 8 nodes: its all-to-alls pay the network, 56 of 63 messages.
  const perf::TimeEstimate t = perf::estimate_time(ds, job, c, report);
  const double bytes = 8.0 * 4096 * 7168 * 2;  // k·N·C·w
  const double one = 63 * 8e-6 + bytes / 64 * (7 / 370e9 + 56 / 50e9);
  CHECK(close_to(t.ep_comm_s, 120 * 4 * 4 * one));  // 120 micro-batches, 4 MoE blocks, 4 each
}
