// mgpu::perf's layout planner (mgpu/perf/planner.h): the candidate layouts, the memory and
// time formulas term by term on small shapes, the links of groups inside and across nodes,
// the order of the plan, lesson 09's hardware file.
#include <catch2/catch.hpp>

#include <cmath>

#include "expect_error.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/perf/planner.h"
#include "perf_test_util.h"

namespace perf = mgpu::perf;
using mgpu::testing::contains;
using mgpu::testing::error_of;
using mgpu::testing::test_hardware;

namespace {

perf::ModelShape tiny() { return perf::ModelShape{65, 128, 4, 4, 128}; }

perf::Cluster one_node(int gpus) {
  perf::Cluster c;
  c.hardware = test_hardware(1, gpus, 100e9, 5e-6);
  c.flops = 1e12;
  return c;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

}  // namespace

TEST_CASE("candidate layouts: tp divides the heads, pp at most the blocks, dp splits the batch",
          "[perf][planner]") {
  perf::JobSettings job;
  job.global_batch = 8;
  std::vector<std::string> names;
  for (const perf::Layout& l : perf::candidate_layouts(4, tiny(), job)) names.push_back(l.str());
  CHECK(names == std::vector<std::string>{"DP4 x TP1 x PP1", "DP2 x TP2 x PP1", "DP2 x TP1 x PP2",
                                          "DP1 x TP4 x PP1", "DP1 x TP2 x PP2", "DP1 x TP1 x PP4"});
  perf::ModelShape two_heads = tiny();
  two_heads.n_head = 2;
  two_heads.n_layer = 2;
  CHECK(perf::candidate_layouts(4, two_heads, job).size() == 4);  // no TP4, no PP4
  job.global_batch = 2;
  CHECK(perf::candidate_layouts(4, tiny(), job).size() == 5);  // DP4 cannot split 2 sequences
  job.schedule = "zigzag";
  CHECK(contains(error_of([&] { perf::candidate_layouts(4, tiny(), job); }), "schedule 'zigzag'"));
  CHECK(perf::blocks_of_stage(5, 2, 0) == 3);
  CHECK(perf::blocks_of_stage(5, 2, 1) == 2);
}

TEST_CASE("memory: one rank holds 16 bytes a parameter in fp32 plus a layer's activations",
          "[perf][planner]") {
  const perf::ModelShape m = tiny();
  perf::JobSettings job;
  job.global_batch = 8;
  const perf::MemoryEstimate one = perf::estimate_memory(m, job, {1, 1, 1});
  const double P = static_cast<double>(m.parameters());
  // The count is nn::GPT's, also when the windows are shorter than the position table.
  CHECK(perf::ModelShape{65, 64, 4, 4, 128, 128}.parameters() == mgpu::nn::GPTConfig::tiny(65).num_parameters());
  CHECK(m.parameters() == mgpu::nn::GPTConfig::tiny(65).num_parameters());
  CHECK(near(one.parameters, 4 * P));
  CHECK(near(one.gradients, 4 * P));
  CHECK(near(one.optimizer, 8 * P));
  const double C = 128, T = 128, N = T, V = 65, H = 4;
  // fp32, no dropout: per block 16 values of N·C (4 whole, 12 split) and the H·T² scores.
  const double act = 4 * (4 * (16 * N * C + H * T * T) + 2 * N * V);
  CHECK(near(one.activations, act));  // 1F1B on one stage: one micro-batch in flight

  // TP 2: the blocks' matrices and their biases halve, the LayerNorms and row biases stay.
  const perf::MemoryEstimate tp2 = perf::estimate_memory(m, job, {1, 2, 1});
  CHECK(near(tp2.parameters, 4 * (4 * ((12 * C * C + 7 * C) / 2 + 6 * C) + V * C + T * C + 2 * C)));
  // ZeRO-1 over 4 replicas: a quarter of the moments.
  const perf::MemoryEstimate dp4 = perf::estimate_memory(m, job, {4, 1, 1});
  CHECK(near(dp4.optimizer, 2 * P));
  job.zero_stage = 0;
  CHECK(near(perf::estimate_memory(m, job, {4, 1, 1}).optimizer, 8 * P));
  job.zero_stage = 1;

  // PP 4 over 8 micro-batches: the first stage keeps 4 under 1F1B, 8 under GPipe.
  const perf::MemoryEstimate f1b = perf::estimate_memory(m, job, {1, 1, 4});
  job.schedule = "gpipe";
  const perf::MemoryEstimate gp = perf::estimate_memory(m, job, {1, 1, 4});
  CHECK(f1b.stage == 0);
  const double block = 4 * (16 * N * C + H * T * T);
  CHECK(near(f1b.activations, 4 * block));
  CHECK(gp.stage == 3);  // as many in flight everywhere: the last, with the logits, is the largest
  CHECK(near(gp.activations, 8 * (block + 4 * 2 * N * V)));
  // SP leaves less whole-sized.
  job.schedule = "1f1b";
  job.sequence_parallel = true;
  CHECK(perf::estimate_memory(m, job, {1, 2, 1}).activations < tp2.activations);
}

TEST_CASE("time: compute over the stages, the bubble (p-1)/v, TP, PP and DP messages",
          "[perf][planner]") {
  const perf::ModelShape m = tiny();
  perf::JobSettings job;
  job.global_batch = 8;
  const perf::Cluster c = one_node(4);
  const double C = 128, T = 128, V = 65;
  const double flops_mb = 3 * T * (4 * (24 * C * C + 4 * T * C) + 2 * C * V);
  const perf::TimeEstimate one = perf::estimate_time(m, job, c, {1, 1, 1});
  CHECK(one.micro_batches == 8);
  CHECK(near(one.compute_s, 8 * flops_mb / 1e12));
  CHECK(one.bubble_s == 0);
  CHECK(one.tp_comm_s == 0);
  CHECK(one.dp_comm_s == 0);
  CHECK(one.pp_comm_s == 0);

  const perf::TimeEstimate pp4 = perf::estimate_time(m, job, c, {1, 1, 4});
  const double t_mb = 3 * T * (24 * C * C + 4 * T * C + 2 * C * V) / 1e12;  // the last stage
  CHECK(near(pp4.compute_s, 8 * t_mb));
  CHECK(near(pp4.bubble_s, 3 * t_mb));
  CHECK(pp4.pp_comm_s > 0);
  job.schedule = "interleaved";
  job.virtual_stages = 1;
  CHECK(near(perf::estimate_time(m, job, c, {1, 1, 2}).bubble_s,
             perf::estimate_time(m, job, c, {1, 1, 2}).compute_s / 8));
  job.virtual_stages = 2;
  CHECK(near(perf::estimate_time(m, job, c, {1, 1, 2}).bubble_s * 2 * 8,
             perf::estimate_time(m, job, c, {1, 1, 2}).compute_s));
  job.schedule = "1f1b";

  const perf::TimeEstimate tp4 = perf::estimate_time(m, job, c, {1, 4, 1});
  const double ar = perf::ring_allreduce_seconds(perf::AlphaBeta{5e-6, 1e-11}, T * C * 4, 4);
  CHECK(near(tp4.tp_comm_s, 8 * 4 * 4 * ar));
  const perf::TimeEstimate dp4 = perf::estimate_time(m, job, c, {4, 1, 1});
  // ZeRO-1: a reduce-scatter and an all-gather, DDP's all-reduce's bytes and steps.
  CHECK(near(dp4.dp_comm_s,
             perf::ring_allreduce_seconds(perf::AlphaBeta{5e-6, 1e-11}, 4.0 * m.parameters(), 4)));
}

TEST_CASE("links: a group inside a node, a group across nodes; the plan's order",
          "[perf][planner]") {
  // 2 nodes of 4 GPUs: 100 GB/s and 3 us inside a node, 10 GB/s per node and 10 us between.
  const perf::Hardware hw = test_hardware(2, 4, 100e9, 3e-6, 10e9, 10e-6, "");
  CHECK(perf::group_link(hw, 1, 1).alpha == 0);
  CHECK(perf::group_link(hw, 4, 1).alpha == 3e-6);      // TP 4 on one node
  CHECK(perf::group_link(hw, 2, 4).alpha == 10e-6);     // DP 2, 4 ranks apart: two nodes
  // ... one rank on each node, beside the three other DP groups: a quarter of the network.
  CHECK(near(perf::group_link(hw, 2, 4).beta, 1 / 2.5e9));
  CHECK(near(perf::group_link(hw, 8, 1).beta, 1 / 10e9));  // one group of every GPU: all of it
  CHECK(near(perf::group_link(hw, 4, 2).beta, 1 / 5e9));   // two ranks a node: half

  perf::Cluster c;
  c.hardware = hw;
  c.flops = 1e12;
  perf::JobSettings job;
  job.global_batch = 16;
  perf::ModelShape m = tiny();
  m.n_head = 8;
  m.n_layer = 8;
  const std::vector<perf::PlanEntry> all = perf::plan_layouts(m, job, c);
  REQUIRE(!all.empty());
  for (std::size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1].time.step_s() <= all[i].time.step_s());
  // A memory only the most split layouts meet: those come first, the rest after, by memory.
  double smallest = all[0].memory.total();
  for (const auto& e : all) smallest = std::min(smallest, e.memory.total());
  c.memory_bytes = smallest * 1.0001;
  const std::vector<perf::PlanEntry> tight = perf::plan_layouts(m, job, c);
  CHECK(tight[0].fits);
  CHECK_FALSE(tight.back().fits);
  for (const auto& e : tight) CHECK(e.fits == (e.memory.total() <= c.memory_bytes));
}

TEST_CASE("lesson 09's hardware file gives the links, the device's compute and its memory",
          "[perf][planner]") {
  const std::string file = MGPU_SOURCE_ROOT "/lessons/09_time_cost/hardware.json";
  const perf::Cluster c = perf::read_cluster(file, "2 nodes x 8, 400 Gb/s", 80);
  CHECK(c.hardware.ranks() == 16);
  CHECK(near(c.hardware.inter_bw, 50e9));
  CHECK(near(c.flops, 100e12));
  CHECK(near(c.memory_bytes, 80.0 * (1ull << 30)));
  CHECK(contains(error_of([&] { perf::read_cluster(file, "nope"); }), "\"8 GPUs, NVLink\""));
}

TEST_CASE("time: ZeRO's traffic by stage, recomputation's FLOPs, 16-bit messages",
          "[perf][planner]") {
  const perf::ModelShape m = tiny();
  perf::JobSettings job;
  job.global_batch = 8;  // 2 micro-batches a replica at DP 4
  const perf::Cluster c = one_node(4);
  const perf::AlphaBeta link{5e-6, 1e-11};
  const double P = static_cast<double>(m.parameters());
  job.precision.name = "bf16";  // values 2 bytes, gradients 2
  auto dp_s = [&](int stage) {
    job.zero_stage = stage;
    return perf::estimate_time(m, job, c, {4, 1, 1}).dp_comm_s;
  };
  const double all_reduce = perf::ring_allreduce_seconds(link, 2 * P, 4), half = all_reduce / 2;
  CHECK(near(dp_s(0), all_reduce));                   // DDP
  CHECK(near(dp_s(1), all_reduce));                   // reduce-scatter + all-gather: the same
  CHECK(near(dp_s(2), 2 * half + half));              // a reduce-scatter per micro-batch
  CHECK(near(dp_s(3), 2 * (half + 2 * half)));        // 1.5x DDP per micro-batch
  job.precision.fp32_grads = true;  // 4-byte gradients reduced, 2-byte weights gathered
  CHECK(near(dp_s(1), perf::ring_allreduce_seconds(link, 4 * P, 4) / 2 + half));
  job.precision.fp32_grads = false;
  job.zero_stage = 1;

  // Recomputation: full runs each block's forward again, selective the attention core.
  const double C = 128, T = 128, V = 65;
  auto compute = [&](const char* recompute, bool flash) {
    job.recompute = recompute;
    job.flash_attention = flash;
    return perf::estimate_time(m, job, c, {1, 1, 1}).compute_s;
  };
  const double per_token = 4 * (3 * (24 * C * C + 4 * T * C)) + 6 * C * V;
  CHECK(near(compute("none", false), 8 * T * per_token / 1e12));
  CHECK(near(compute("full", false), 8 * T * (per_token + 4 * (24 * C * C + 4 * T * C)) / 1e12));
  CHECK(near(compute("selective", false), 8 * T * (per_token + 4 * 4 * T * C) / 1e12));
  CHECK(near(compute("selective", true), 8 * T * (per_token + 4 * 2 * T * C) / 1e12));
  CHECK(near(compute("none", true), compute("selective", true)));
  // TP's all-reduces move 16-bit activations.
  job.recompute = "none";
  job.flash_attention = false;
  CHECK(near(perf::estimate_time(m, job, c, {1, 4, 1}).tp_comm_s,
             8 * 4 * 4 * perf::ring_allreduce_seconds(link, T * C * 2, 4)));
}

TEST_CASE("the plan refuses what makes no sense; rows within the error are ties",
          "[perf][planner]") {
  perf::JobSettings job;
  perf::ModelShape m = tiny();
  m.positions = 128;
  m.seq = 129;
  CHECK(contains(error_of([&] { perf::candidate_layouts(4, m, job); }), "past the model's context of 128"));
  m = tiny();
  m.vocab_size = 0;
  CHECK(contains(error_of([&] { perf::candidate_layouts(4, m, job); }), "at least 1"));
  m = tiny();
  job.zero_stage = 4;
  CHECK(contains(error_of([&] { perf::candidate_layouts(4, m, job); }), "ZeRO stage 4"));
  job.zero_stage = 1;
  job.precision.name = "fp8";
  CHECK(contains(error_of([&] { perf::candidate_layouts(4, m, job); }), "precision 'fp8'"));
  job.precision.name = "fp32";

  std::vector<perf::PlanEntry> rows(4);
  const double steps[] = {1.0, 1.05, 1.2, 0.5};
  for (int i = 0; i < 4; ++i) {
    rows[i].time.compute_s = steps[i];
    rows[i].fits = i < 3;  // the fastest does not fit: it cannot be the one others tie with
  }
  CHECK(perf::mark_ties(rows, 0.10) == 2);
  CHECK((rows[0].tie && rows[1].tie && !rows[2].tie && !rows[3].tie));
  CHECK(perf::mark_ties(rows, 0.01) == 0);  // the fastest alone
  CHECK_FALSE(rows[0].tie);
}
