/// @file train_report.h
/// @brief What lesson 09's program sets up and reports around its training loop: its own
/// flags, the model between two clock markers, the set-up lines, each step's record and
/// trace spans, and the epoch's breakdown. Program-only: the tests do not use it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/parallel/all.h"
#include "mgpu/perf/time_cost.h"
#include "step_timing.h"

namespace mgpu::lesson09 {

/// The program's own flags, beside the shared ones.
struct Flags {
  std::optional<double> bucket_cap_mb;  // not given: PyTorch's default (25 MiB, first 1 MiB)
  int accumulate = 1;
  int num_workers = 0, prefetch_factor = 2;
  bool pin_memory = false;
  double storage_latency_us = 0;
  std::string precision = "fp32";
  std::string comm_hook = "allreduce";
  std::int64_t warmup_steps = 5;
  bool no_eval = false;
  std::string breakdown;
};

/// Adds the program's flags to `cli`.
inline void add_time_cost_flags(CLI::App& cli, Flags& o) {
  cli.add_option("--bucket-cap-mb", o.bucket_cap_mb, "cap of every bucket, MiB (not given: "
                 "25 MiB, the first bucket 1 MiB, as PyTorch)")->check(app::non_negative_real());
  cli.add_option("--accumulate", o.accumulate, "all-reduce every K micro-batches (no_sync "
                 "for the others); the optimizer steps then")->check(app::positive_integer(1024))
      ->capture_default_str();
  cli.add_option("--num-workers", o.num_workers, "DataLoader worker threads (0: load in the "
                 "training loop, as PyTorch's num_workers=0)")->check(app::non_negative_integer(64))
      ->capture_default_str();
  cli.add_option("--prefetch-factor", o.prefetch_factor, "batches each worker loads ahead")
      ->check(app::positive_integer(64))->capture_default_str();
  cli.add_flag("--pin-memory", o.pin_memory, "load batches into pinned host memory");
  cli.add_option("--storage-latency-us", o.storage_latency_us, "slow storage: every sample "
                 "read waits this long")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--precision", o.precision, "fp32, or bf16 (autocast: Linear and Conv2d "
                 "products in bf16 on fp32 weights)")->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cli.add_option("--comm-hook", o.comm_hook, "allreduce, or fp16 (buckets sent as f16)")
      ->check(CLI::IsMember({"allreduce", "fp16"}))->capture_default_str();
  cli.add_option("--warmup-steps", o.warmup_steps, "first steps left out of the breakdown")
      ->check(app::non_negative_integer())->capture_default_str();
  cli.add_flag("--no-eval", o.no_eval, "skip the test set (timing runs); test_acc is then 0");
  cli.add_option("--breakdown", o.breakdown, "rank 0 writes every step of every rank here "
                 "(JSON lines)");
}

/// After parsing: false, with a one-line error on stderr, for flags that contradict.
inline bool flags_ok(const CLI::App& cli, const Flags& o) {
  if (o.num_workers == 0 && cli.count("--prefetch-factor")) {
    std::fprintf(stderr, "error: --prefetch-factor needs --num-workers > 0 (as PyTorch's "
                         "DataLoader: with no workers nothing loads ahead)\n");
    return false;
  }
  return true;
}

/// The training loader's options: batches stay on the host (the step copies them).
inline data::DataLoaderOptions loader_options(const app::Options& opt, const Flags& o) {
  data::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.num_workers = o.num_workers;
  if (o.num_workers > 0) lo.prefetch_factor = o.prefetch_factor;
  lo.pin_memory = o.pin_memory;
  return lo;
}

/// The model between two markers: forward and backward are timed from inside DDP's calls.
inline std::shared_ptr<nn::Sequential> timed_model(const app::Options& opt,
                                                   const data::Dataset& train, PhaseClock& clock) {
  auto inner = nn::make_model(opt.model, train.sample_shape(), train.num_classes());
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<ClockMarker>(clock, Mark::count, Mark::backward_end));
  m->add(inner);
  m->add(std::make_shared<ClockMarker>(clock, Mark::count, Mark::backward_begin));
  return m;
}

/// Rank 0's set-up lines (model, DDP) and the end of the batch line; the run's settings
/// on every metrics line.
inline void print_setup(const app::Options& opt, const Flags& o, nn::Module& model,
                        const optim::Optimizer& optimizer, parallel::DistributedDataParallel& ddp,
                        app::Run& run) {
  dist::log0("model: ", opt.model, ", ", model.num_parameters(), " parameters (",
             4.0 * static_cast<double>(model.num_parameters()) / 1048576.0, " MiB of f32 "
             "gradients); ", optimizer.describe(), "; precision ", o.precision, "; comm hook ",
             o.comm_hook, "\n", ddp.describe());
  run.set_batch_note(
      "gradients all-reduced every " + std::to_string(o.accumulate) + " micro-batch(es); DataLoader: " +
      std::to_string(o.num_workers) + " worker(s)" +
      (o.num_workers > 0 ? ", prefetch_factor " + std::to_string(o.prefetch_factor) : "") +
      (o.pin_memory ? ", pinned memory" : "") +
      (o.storage_latency_us > 0 ? ", storage " + std::to_string(o.storage_latency_us) + " us per sample" : ""));
  run.add_metric_fields({{"batch_per_rank", static_cast<double>(opt.batch_size)},
                         {"accumulate", o.accumulate},
                         {"num_workers", o.num_workers},
                         {"bucket_cap_mb", o.bucket_cap_mb.value_or(-1)}});
}

/// One step as measured: the record your step_phases takes apart, and the sample the
/// breakdown keeps (its phases still to fill).
struct MeasuredStep {
  perf::StepRecord record;  ///< the marks' intervals and each bucket's all-reduce
  StepSample sample;        ///< for the breakdown
};

/// The step that just ended (clock.end_step() done): its intervals from the clock's marks,
/// each bucket's all-reduce from `ddp_trace` (relative to backward's start in the sample,
/// for the model's workload), and its spans on `trace`: h2d and optimizer here, DDP's
/// phases and buckets through ddp_trace.
inline MeasuredStep measure_step(const PhaseClock& clock, app::DdpStepTrace& ddp_trace,
                                 const parallel::StepTimeline& ddp_step, app::Trace& trace,
                                 int epoch, std::int64_t step, std::int64_t batch, bool sync) {
  MeasuredStep m;
  perf::StepRecord& r = m.record;
  r.step = {clock.at(Mark::step_begin), app::now_s()};
  r.data_wait = clock.between(Mark::step_begin, Mark::data_ready);
  r.h2d = clock.between(Mark::data_ready, Mark::on_device);
  r.forward = clock.between(Mark::on_device, Mark::forward_end);
  r.backward = clock.between(Mark::backward_begin, Mark::backward_end);
  r.optimizer = clock.between(Mark::reduced, Mark::optimizer_end);
  StepSample& s = m.sample;
  s.epoch = epoch;
  s.step = step;
  s.batch = batch;
  s.synchronized = sync;
  s.backward_s = r.backward.length();
  // DDP's phases as the clock saw them (forward with the loss, on the GPU's own times).
  parallel::StepTimeline t = ddp_step;
  t.forward_begin = r.forward.begin;
  t.forward_end = r.forward.end;
  t.backward_begin = r.backward.begin;
  t.backward_end = r.backward.end;
  t.reduce_end = clock.at(Mark::reduced);
  for (parallel::CommRecord b : ddp_trace.record(t)) {
    r.buckets.push_back({b.launch_s, b.done_s});
    b.launch_s -= r.backward.begin;
    b.done_s -= r.backward.begin;
    s.buckets.push_back(b);
  }
  trace.span("compute", "h2d", r.h2d.begin, r.h2d.end);
  trace.span("compute", "optimizer", r.optimizer.begin, r.optimizer.end);
  return m;
}

/// The epoch's breakdown: the mean of every rank on the metrics line and in one line.
inline void report_breakdown(const Breakdown::EpochMeans& m, app::Run& run, int world) {
  const perf::Phases& p = m.mean;
  const app::MetricFields fields = {
      {"data_wait_ms", 1e3 * p.data_wait}, {"h2d_ms", 1e3 * p.h2d},
      {"forward_ms", 1e3 * p.forward}, {"backward_ms", 1e3 * p.backward},
      {"exposed_comm_ms", 1e3 * p.exposed_comm}, {"optimizer_ms", 1e3 * p.optimizer},
      {"other_ms", 1e3 * p.other}, {"measured_step_ms", 1e3 * p.total()},
      {"slowest_rank_data_wait_ms", 1e3 * m.slowest.data_wait},
      {"slowest_rank_exposed_comm_ms", 1e3 * m.slowest.exposed_comm},
      {"measured_steps", static_cast<double>(m.steps)}};
  for (const auto& [name, value] : fields) run.set_metric_field(name, value);
  dist::log0("breakdown (ms per step, mean of ", world, " rank(s), ", m.steps,
             " measured steps): data wait ", 1e3 * p.data_wait, ", h2d ", 1e3 * p.h2d,
             ", forward ", 1e3 * p.forward, ", backward ", 1e3 * p.backward,
             ", exposed comm ", 1e3 * p.exposed_comm, ", optimizer ", 1e3 * p.optimizer,
             ", other ", 1e3 * p.other, " = ", 1e3 * p.total());
}

}  // namespace mgpu::lesson09
