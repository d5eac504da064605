// What lesson 10's program takes and measures: its flags, memory per rank beside the
// formula (parallel/sharding/sharding_model.h), the collectives of each step and the bytes a ring
// sends for them, step times, and the trace spans. Provided: not part of the tasks.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/app/report.h"
#include "mgpu/app/trace.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/parallel/comm_log.h"
#include "mgpu/parallel/ddp/ddp.h"
#include "mgpu/parallel/sharding/sharded_data_parallel.h"

namespace mgpu::lesson10 {

/// The program's own flags, beside the shared ones.
struct ShardFlags {
  int zero = 3;                   ///< 0: DDP; 1-3: ZeRO stage
  std::string precision = "fp32"; ///< the layers' compute dtype
  double unit_cap_mb = 0;         ///< 0: one unit per layer with parameters
  bool no_prefetch = false;       ///< gather a unit only when it is reached
  bool bucket_view = false;       ///< DDP's gradient_as_bucket_view
};
/// Adds --zero, --precision, --unit-cap-mb, --no-prefetch, --gradient-as-bucket-view;
/// parsing refuses --gradient-as-bucket-view with a --zero other than 0 (one line).
void add_shard_flags(CLI::App& cli, ShardFlags& f);
/// The dtype --precision names.
DType compute_dtype(const std::string& precision);
/// DDP's options (--zero 0).
parallel::DDPOptions ddp_options(const ShardFlags& f);
/// ShardedDataParallel's options (--zero 1-3).
parallel::ShardingOptions sharding_options(const ShardFlags& f);

/// What the formulas predict for one run.
struct MemoryFormula {
  parallel::MemoryPrediction memory;  ///< kept between steps, and the working set on top
  double bytes_sent_per_step = 0;     ///< per rank, as rings send the step's collectives
  double collectives_per_step = 0;    ///< the collectives of one step
};

/// DDP (stage 0) for a model of `parameters` fp32 elements; `bucket_view`: DDP's
/// gradient_as_bucket_view (no separate bucket copy). `compute` f16/bf16: under autocast.
MemoryFormula ddp_formula(std::int64_t parameters, bool bucket_view, int world, DType compute,
                          std::size_t buckets);
/// A sharded model, from its units.
MemoryFormula sharded_formula(const parallel::ShardedDataParallel& sdp);
/// "formula per rank: keeps 12.3 MiB (...), peak 14.5 MiB + activations; sends ..."
std::string describe_formula(const MemoryFormula& f);

/// One collective of a step.
struct Collective {
  std::string op;         ///< "all-reduce", "reduce-scatter", "all-gather"
  std::string name;       ///< for the trace ("reduce-scatter unit 2")
  double bytes = 0;       ///< bytes of the full buffer
  double launch_s = 0;    ///< when it was issued
  double done_s = 0;      ///< when it completed
};
/// DDP's bucket all-reduces of a step.
std::vector<Collective> ddp_collectives(const std::vector<parallel::CommRecord>& buckets);
/// The units' collectives of a step.
std::vector<Collective> sharded_collectives(const std::vector<parallel::CommRecord>& log);

/// The numbers of an epoch's steady steps (the first two steps are left out when there are
/// more than three: they allocate AdamW's state and rebuild DDP's buckets).
struct StepSummary {
  std::int64_t steps = 0;            ///< steps summarised
  double step_ms_median = 0;         ///< rank 0's step times
  double step_ms_min = 0;            ///< fastest
  double step_ms_max = 0;            ///< slowest
  double kept_bytes = 0;             ///< allocated after the step, largest over ranks
  double peak_bytes = 0;             ///< peak during the step, largest over ranks and steps
  double bytes_sent_per_step = 0;    ///< rank 0's, ring model over the collectives issued
  double collectives_per_step = 0;   ///< rank 0's
};

/// Records every step of an epoch: its phases and collectives as trace spans, its memory
/// and bytes for the summary.
class StepRecorder {
 public:
  /// Spans go to `trace` (when it is on).
  explicit StepRecorder(app::Trace& trace) : trace_(trace) {}
  /// One step: forward from t0, backward from t1, optimizer from t2 to t3 (app::now_s()),
  /// the bytes allocated after it and at its peak (relative to before the model), and its
  /// collectives on `world` ranks.
  void record(double t0, double t1, double t2, double t3, double kept_bytes, double peak_bytes,
              const std::vector<Collective>& collectives, int world);
  /// The epoch's summary (a collective over `group`: the largest memory of any rank), and
  /// starts a new epoch.
  StepSummary summary(dist::ProcessGroup& group);

 private:
  struct Step {
    double ms, kept, peak, bytes_sent, collectives;
  };
  app::Trace& trace_;
  std::vector<Step> steps_;
};

/// The metrics fields of an epoch (MiB, bytes, ms).
app::MetricFields metric_fields(const StepSummary& s, const MemoryFormula& f, int zero, int world);
/// Two lines: measured beside the formula.
std::string describe_summary(const StepSummary& s, const MemoryFormula& f);

}  // namespace mgpu::lesson10
