// Lesson 10's measurements: formulas for a run, the collectives of each step, summaries.
#include "sharding_report.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "mgpu/app/flags.h"
#include "mgpu/dist/dist.h"
#include "mgpu/parallel/sharding/sharding_model.h"

namespace mgpu::lesson10 {

void add_shard_flags(CLI::App& cli, ShardFlags& f) {
  cli.add_option("--zero", f.zero, "0: DDP (everything on every rank); 1: optimizer state "
                 "sharded; 2: + gradients; 3: + parameters (fully sharded)")
      ->check(CLI::Range(0, 3))->capture_default_str();
  cli.add_option("--precision", f.precision, "fp32, bf16 or fp16: the dtype the layers compute "
                 "and the gradients travel in (master weights and AdamW stay fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  cli.add_option("--unit-cap-mb", f.unit_cap_mb, "layers grouped into units of at least this "
                 "many MiB of fp32 parameters (0: a unit per layer; 1e12: the whole model)")
      ->check(app::non_negative_real())->capture_default_str();
  cli.add_flag("--no-prefetch", f.no_prefetch,
               "start a unit's all-gather only when the unit is reached");
  CLI::Option* bucket_view = cli.add_flag(
      "--gradient-as-bucket-view", f.bucket_view,
      "--zero 0 only: DDP's gradients are views of its buckets (no separate copy)");
  // ZeRO has no DDP buckets: the flag would change nothing there, so it is refused.
  cli.final_callback([&f, bucket_view] {
    if (bucket_view->count() > 0 && f.zero != 0)
      throw CLI::ValidationError(
          "--gradient-as-bucket-view", "DDP's option, for --zero 0 only; --zero " +
                                           std::to_string(f.zero) + " shards the gradients "
                                           "into units, not DDP buckets, so it would change "
                                           "nothing: drop it or use --zero 0");
  });
}

DType compute_dtype(const std::string& precision) {
  return precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
}

parallel::DDPOptions ddp_options(const ShardFlags& f) {
  parallel::DDPOptions o;
  o.gradient_as_bucket_view = f.bucket_view;
  return o;
}

parallel::ShardingOptions sharding_options(const ShardFlags& f) {
  parallel::ShardingOptions o;
  o.stage = f.zero;
  o.compute_dtype = compute_dtype(f.precision);
  o.prefetch = !f.no_prefetch;
  o.unit_cap_bytes = f.unit_cap_mb >= 1e12 ? std::numeric_limits<std::size_t>::max()
                                           : static_cast<std::size_t>(f.unit_cap_mb * 1048576.0);
  return o;
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double largest_over_ranks(double x, dist::ProcessGroup& group) {
  Tensor t = Tensor::from_vector(std::vector<double>{x}, {1});
  group.all_reduce(t, dist::ReduceOp::max).wait();
  return t.to_vector<double>()[0];
}

}  // namespace

MemoryFormula ddp_formula(std::int64_t parameters, bool bucket_view, int world, DType compute,
                          std::size_t buckets) {
  MemoryFormula f;
  f.memory = parallel::predict_memory(0, std::vector<std::int64_t>{parameters}, world, DType::f32,
                                      true, !bucket_view);
  // Under autocast the 16-bit weight casts live from the forward to the backward that uses
  // them (the layers keep them for it).
  if (compute != DType::f32)
    f.memory.working_set = static_cast<double>(dtype_size(compute)) * static_cast<double>(parameters);
  f.bytes_sent_per_step = parallel::ring_bytes_sent("all-reduce", 4.0 * static_cast<double>(parameters), world);
  f.collectives_per_step = static_cast<double>(buckets);
  return f;
}

MemoryFormula sharded_formula(const parallel::ShardedDataParallel& sdp) {
  MemoryFormula f;
  f.memory = sdp.predicted_memory();
  const int world = sdp.process_group().size();
  const int stage = sdp.options().stage;
  std::vector<const char*> ops = stage == 1   ? std::vector<const char*>{"all-reduce", "all-gather"}
                                 : stage == 2 ? std::vector<const char*>{"reduce-scatter", "all-gather"}
                                              : std::vector<const char*>{"all-gather", "all-gather", "reduce-scatter"};
  for (std::size_t k = 0; k < sdp.num_units(); ++k) {
    const parallel::ShardedUnit& u = sdp.unit(k);
    const double bytes = static_cast<double>(u.layout().padded_numel) *
                         static_cast<double>(dtype_size(u.compute_dtype()));
    for (const char* op : ops) f.bytes_sent_per_step += parallel::ring_bytes_sent(op, bytes, world);
    f.collectives_per_step += static_cast<double>(ops.size());
  }
  return f;
}

std::string describe_formula(const MemoryFormula& f) {
  char text[96];
  std::snprintf(text, sizeof text, "%.0f collectives", f.collectives_per_step);
  return "formula per rank: keeps " + app::mib(f.memory.persistent()) + " (parameters " +
         app::mib(f.memory.params) + ", gradients " + app::mib(f.memory.grads) + ", AdamW moments " +
         app::mib(f.memory.optimizer_state) + "); peak " + app::mib(f.memory.peak()) +
         " + activations; sends " + app::mib(f.bytes_sent_per_step) + " per step in " + text;
}

std::vector<Collective> ddp_collectives(const std::vector<parallel::CommRecord>& buckets) {
  std::vector<Collective> out;
  for (const parallel::CommRecord& b : buckets)
    out.push_back(Collective{"all-reduce", "all-reduce bucket " + std::to_string(b.index),
                             static_cast<double>(b.bytes), b.launch_s, b.done_s});
  return out;
}

std::vector<Collective> sharded_collectives(const std::vector<parallel::CommRecord>& log) {
  std::vector<Collective> out;
  for (const parallel::CommRecord& c : log)
    out.push_back(Collective{c.op, c.op + " unit " + std::to_string(c.index),
                             static_cast<double>(c.bytes), c.launch_s, c.done_s});
  return out;
}

void StepRecorder::record(double t0, double t1, double t2, double t3, double kept_bytes,
                          double peak_bytes, const std::vector<Collective>& collectives, int world) {
  double sent = 0;
  for (const Collective& c : collectives) {
    sent += parallel::ring_bytes_sent(c.op, c.bytes, world);
    trace_.span("comm", c.name, c.launch_s, c.done_s, {{"bytes", c.bytes}});
  }
  trace_.span("compute", "forward", t0, t1);
  trace_.span("compute", "backward", t1, t2);
  trace_.span("compute", "optimizer", t2, t3);
  steps_.push_back(Step{1e3 * (t3 - t0), kept_bytes, peak_bytes, sent,
                        static_cast<double>(collectives.size())});
}

StepSummary StepRecorder::summary(dist::ProcessGroup& group) {
  // Steady steps: without the first two when there are enough.
  std::vector<Step> steady(steps_.begin() + (steps_.size() > 3 ? 2 : 0), steps_.end());
  steps_.clear();
  StepSummary s;
  s.steps = static_cast<std::int64_t>(steady.size());
  if (steady.empty()) return s;
  std::vector<double> ms;
  for (const Step& st : steady) {
    ms.push_back(st.ms);
    s.kept_bytes = st.kept;  // the last step's
    s.peak_bytes = std::max(s.peak_bytes, st.peak);
    s.bytes_sent_per_step += st.bytes_sent / static_cast<double>(steady.size());
    s.collectives_per_step += st.collectives / static_cast<double>(steady.size());
  }
  std::sort(ms.begin(), ms.end());
  s.step_ms_median = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  s.step_ms_min = ms.front();
  s.step_ms_max = ms.back();
  s.kept_bytes = largest_over_ranks(s.kept_bytes, group);
  s.peak_bytes = largest_over_ranks(s.peak_bytes, group);
  return s;
}

app::MetricFields metric_fields(const StepSummary& s, const MemoryFormula& f, int zero, int world) {
  return {{"zero", zero},
          {"ranks", world},
          {"kept_MiB", s.kept_bytes / kMiB},
          {"peak_MiB", s.peak_bytes / kMiB},
          {"formula_kept_MiB", f.memory.persistent() / kMiB},
          {"formula_peak_MiB", f.memory.peak() / kMiB},
          {"bytes_sent_per_step", s.bytes_sent_per_step},
          {"formula_bytes_per_step", f.bytes_sent_per_step},
          {"collectives_per_step", s.collectives_per_step},
          {"step_ms_median", s.step_ms_median},
          {"step_ms_min", s.step_ms_min},
          {"step_ms_max", s.step_ms_max},
          {"steady_steps", static_cast<double>(s.steps)}};
}

std::string describe_summary(const StepSummary& s, const MemoryFormula& f) {
  char text[256];
  std::snprintf(text, sizeof text,
                "measured per rank (%lld steady steps): keeps %s (formula %s, %+.2f%%), peak %s "
                "(formula %s without activations); sends %s per step in %.0f collectives "
                "(formula %s); step %.1f ms median (%.1f-%.1f)",
                static_cast<long long>(s.steps), app::mib(s.kept_bytes).c_str(),
                app::mib(f.memory.persistent()).c_str(),
                100.0 * (s.kept_bytes - f.memory.persistent()) / f.memory.persistent(),
                app::mib(s.peak_bytes).c_str(), app::mib(f.memory.peak()).c_str(),
                app::mib(s.bytes_sent_per_step).c_str(), s.collectives_per_step,
                app::mib(f.bytes_sent_per_step).c_str(), s.step_ms_median, s.step_ms_min,
                s.step_ms_max);
  return text;
}

}  // namespace mgpu::lesson10
