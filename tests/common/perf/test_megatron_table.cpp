// The planner's time model (mgpu/perf/planner.h) against Table 1 of Narayanan et al. 2021,
// "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM": ten
// GPT models from 1.7B to 1T parameters, each on the layout the authors ran it with, and
// the teraFLOP/s per GPU each achieved on NVIDIA's Selene (DGX A100 80GB nodes). The
// chapter's planner section (lessons/15_3d_parallel/README.md) tabulates what this prints
// with MGPU_PRINT_MEGATRON_TABLE=1 set.
//
// Three checks:
//   - at the A100's peak, 312 teraFLOP/s, the model predicts more than every published
//     number (an upper bound: it prices only the products, the links and the bubble);
//   - with one number fitted, the sustained FLOP/s of the products (from the 1.7B row),
//     the predictions for the published layouts are within 25% of the published
//     throughput, except for the three largest models, which the model under-predicts by
//     more (listed below, not hidden by a wider error);
//   - the published layout is the planner's fastest for its model and GPU count, or ties
//     with it within the plan program's default error (10%).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mgpu/perf/planner.h"

namespace perf = mgpu::perf;

namespace {

// Table 1 of the paper (weak scaling): attention heads, hidden size, layers,
// tensor-parallel size t, pipeline-parallel size p, GPUs n, batch size B (sequences), and
// the achieved teraFLOP/s per GPU. All models: vocabulary 51,200 and sequence 2048 (its
// section 5.1). The table gives neither the micro-batch nor the schedule.
struct TableRow {
  const char* name;  // the parameter count the table gives, in billions
  int heads, hidden, layers, t, p, gpus, batch;
  double tflops;     // achieved teraFLOP/s per GPU
};
const TableRow table1[] = {
    {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 137},
    {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 138},
    {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 142},
    {"18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135},
    {"39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138},
    {"76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {"145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {"310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {"529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {"1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163},
};

// The paper's GPT: learned positions, biases, a head tied to the token table.
perf::ModelShape model_of(const TableRow& r) {
  perf::ModelShape m;
  m.vocab_size = 51200;
  m.seq = 2048;
  m.n_layer = r.layers;
  m.n_head = r.heads;
  m.n_embd = r.hidden;
  return m;
}

// The paper's runs: mixed precision (16-bit values, fp32 gradients as Megatron-LM's
// main_grad), plain data parallelism (no ZeRO), every layer's forward recomputed (its
// FLOPs count of section 5.1 includes it), dropout. Micro-batch 1 and the 1F1B schedule
// are this test's choice: Table 1 states neither.
perf::JobSettings job_of(const TableRow& r) {
  perf::JobSettings job;
  job.global_batch = r.batch;
  job.micro_batch = 1;
  job.precision.name = "bf16";
  job.precision.fp32_grads = true;
  job.zero_stage = 0;
  job.recompute = "full";
  job.dropout = true;
  job.schedule = "1f1b";
  return job;
}

// Selene's nodes as the paper describes them (section 5): 8 A100 80GB GPUs on NVLink and
// NVSwitch, and 8 HDR InfiniBand adapters of 200 Gb/s each per node, so 200 GB/s a node
// each way. NVLink: the A100's 600 GB/s in both directions together, 300 GB/s each way,
// taken as the all-reduce bus bandwidth (a bound: nccl-tests measure less). The latencies
// are lesson 09's assumptions (lessons/09_time_cost/hardware.json: 3 us in a node, 8 us
// on a 400 Gb/s network), not the paper's.
perf::Cluster selene(int gpus, double flops) {
  perf::Cluster c;
  c.hardware.name = "Selene, DGX A100";
  c.hardware.gpus_per_node = 8;
  c.hardware.nodes = gpus / 8;
  c.hardware.intra_busbw = 300e9;
  c.hardware.intra_latency_s = 3e-6;
  c.hardware.inter_bw = 8 * 200e9 / 8;  // 8 adapters x 200 Gb/s, in bytes/s
  c.hardware.inter_latency_s = 8e-6;
  c.memory_bytes = 80.0 * (1 << 30);
  c.flops = flops;
  return c;
}

// The paper's FLOPs per step (section 5.1, its equation 3): 96·B·s·l·h²(1 + s/(6h) +
// V/(16·l·h)), with recomputation; the planner's own count equals it (test_published.cpp).
double paper_flops(const TableRow& r) {
  const double s = 2048, V = 51200, l = r.layers, h = r.hidden;
  return 96.0 * r.batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

// teraFLOP/s per GPU the planner predicts for row r on its published layout, counted as
// the paper counts them: its FLOPs per step over n GPUs and the predicted step time.
double predicted_tflops(const TableRow& r, double flops) {
  const perf::Layout l{r.gpus / (r.t * r.p), r.t, r.p};
  const perf::TimeEstimate e = perf::estimate_time(model_of(r), job_of(r), selene(r.gpus, flops), l);
  return paper_flops(r) / (r.gpus * e.step_s()) / 1e12;
}

// The sustained FLOP/s that makes the prediction for row r equal the published number
// (the prediction grows with the rate, and a fixed point of the ratio converges).
double calibrated_flops(const TableRow& r) {
  double f = 312e12;
  for (int i = 0; i < 50; ++i) f *= r.tflops / predicted_tflops(r, f);
  return f;
}

const double a100_peak = 312e12;  // bf16/fp16 tensor-core peak of one A100 (the paper's)
const double stated_error = 0.25;
const double planner_error = 0.10;  // the plan program's default --error-pct

bool print_table() { return std::getenv("MGPU_PRINT_MEGATRON_TABLE") != nullptr; }

// The planner's layouts for row r at `flops` per GPU, ties within the plan program's 10%
// marked.
std::vector<perf::PlanEntry> megatron_plan(const TableRow& r, double flops) {
  std::vector<perf::PlanEntry> plan = perf::plan_layouts(model_of(r), job_of(r), selene(r.gpus, flops));
  perf::mark_ties(plan, planner_error);
  return plan;
}

// The (last) entry of `plan` with row r's published layout; null when the plan lacks it.
const perf::PlanEntry* published_entry(const std::vector<perf::PlanEntry>& plan, const TableRow& r) {
  const perf::PlanEntry* published = nullptr;
  for (const perf::PlanEntry& e : plan)
    if (e.layout.dp == r.gpus / (r.t * r.p) && e.layout.tp == r.t && e.layout.pp == r.p) published = &e;
  return published;
}

}  // namespace

TEST_CASE("Megatron-LM's Table 1: at the A100's peak the time model is an upper bound",
          "[perf][published][megatron]") {
  for (const TableRow& r : table1) {
    INFO(r.name);
    const double p = predicted_tflops(r, a100_peak);
    if (print_table()) std::printf("peak  %-8s published %5.0f predicted %6.1f\n", r.name, r.tflops, p);
    CHECK(p > r.tflops);
    CHECK(p < a100_peak / 1e12);
    // The ranking at that rate: compute is priced at about half its real time, so
    // communication weighs twice what it does at the sustained rate below, and the 18.4B
    // model's TP8 (4 all-reduces a block) falls out of the planner's 10%.
    const std::vector<perf::PlanEntry> plan = megatron_plan(r, a100_peak);
    const perf::PlanEntry* published = published_entry(plan, r);
    REQUIRE(published != nullptr);
    const bool top_or_tie = published == &plan.front() || published->tie;
    if (print_table())
      std::printf("      top %s, published %+.1f%% of it\n", plan.front().layout.str().c_str(),
                  100 * (published->time.step_s() / plan.front().time.step_s() - 1));
    CHECK(top_or_tie == (std::string(r.name) != "18.4B"));
  }
}

TEST_CASE("Megatron-LM's Table 1: teraFLOP/s per GPU on the published layouts, within 25%",
          "[perf][published][megatron]") {
  // One number is fitted: the sustained FLOP/s of the products, from the 1.7B row (data
  // parallelism alone, the row with the least parallelism for the model to price).
  const double sustained = calibrated_flops(table1[0]);
  if (print_table()) std::printf("sustained %.1f TFLOP/s (%.1f%% of peak)\n", sustained / 1e12, 100 * sustained / a100_peak);
  CHECK(sustained / a100_peak == Approx(0.447).epsilon(0.01));
  // The rows the model misses by more than the stated error: it under-predicts the
  // largest models (see the chapter: one FLOP rate for every matrix size, communication
  // never hidden). Listed, not hidden by a wider error; the test fails if that changes.
  const std::string outside[] = {"310.1B", "529.6B", "1008.0B"};
  for (const TableRow& r : table1) {
    INFO(r.name);
    const double p = predicted_tflops(r, sustained);
    const double error = p / r.tflops - 1;
    if (print_table()) std::printf("sust  %-8s published %5.0f predicted %6.1f error %+.1f%%\n", r.name, r.tflops, p, 100 * error);
    bool known_miss = false;
    for (const std::string& o : outside) known_miss = known_miss || o == r.name;
    if (known_miss) {
      CHECK(error < -stated_error);
    } else {
      CHECK(std::abs(error) <= stated_error);
    }
  }
}

TEST_CASE("Megatron-LM's Table 1: the planner's own layout against the published one",
          "[perf][published][megatron]") {
  const double sustained = calibrated_flops(table1[0]);
  for (const TableRow& r : table1) {
    INFO(r.name);
    const std::vector<perf::PlanEntry> plan = megatron_plan(r, sustained);
    const perf::PlanEntry* published = published_entry(plan, r);
    REQUIRE(published != nullptr);
    REQUIRE(published->fits);
    const bool top = published == &plan.front();
    if (print_table())
      std::printf("plan  %-8s top %s %.2fs | published %s %.2fs (%+.1f%%) top %d tie %d\n", r.name,
                  plan.front().layout.str().c_str(), plan.front().time.step_s(), published->layout.str().c_str(),
                  published->time.step_s(), 100 * (published->time.step_s() / plan.front().time.step_s() - 1), top,
                  published->tie);
    CHECK((top || published->tie));
  }
}
