/// @file run.h
/// @brief Run: the bookkeeping around a training loop, so the loop itself stays in view.
///
/// A Run opens --metrics and --trace before the first step, times every epoch, sums the
/// loss and the correct predictions of each step, draws the progress line, and prints the
/// epoch line and, last, the `final:` line (DESIGN.md §8). With a process group it sums the
/// epoch's numbers over every rank and gathers the trace to rank 0. The loop stays in the
/// program:
///
///     app::Run run(opt, "lesson 01: training on one device", {device});
///     for (int epoch = 0; epoch < opt.epochs; ++epoch) {
///       const double lr = app::learning_rate(opt, epoch);
///       optimizer.set_lr(lr);
///       loader->start_epoch(epoch);
///       run.start_epoch(epoch, lr, *loader);
///       data::Batch batch;
///       while (run.next_batch(batch)) {            // Step 1) the next batch
///         ...                                      // Steps 2-5) forward ... optimizer
///         run.step(loss, batch.labels.numel(), correct);
///       }
///       run.end_training();                        // the epoch's training time
///       run.end_epoch(app::evaluate(*model, *test_loader));
///     }
///     return run.finish();
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mgpu/app/evaluate.h"
#include "mgpu/app/flags.h"
#include "mgpu/app/progress.h"
#include "mgpu/app/ranks.h"
#include "mgpu/app/report.h"
#include "mgpu/app/trace.h"
#include "mgpu/data/dataloader.h"
#include "mgpu/device.h"
#include "mgpu/dist/process_group.h"

namespace mgpu::app {

/// The bookkeeping of one training run (see the file comment).
class Run {
 public:
  /// Prints `title` and the device mapping (each rank its own line when there are several),
  /// opens opt.metrics (rank 0) and opt.trace, and starts the run's clock. `devices` are
  /// the ones this process computes on: end_training() waits for them. With `group` (a CPU
  /// group over every rank: a barrier gives all ranks one time origin) the epoch's numbers
  /// are summed over its ranks and the trace is gathered to rank 0, and the first epoch
  /// starts with the batch line (batch_line(): per rank and global); a program without a
  /// group describes its batch itself (lesson 02 splits one batch over its devices).
  Run(const Options& opt, const std::string& title, std::vector<Device> devices,
      dist::ProcessGroup* group = nullptr);
  /// A program started with mpirun: computes on ranks.device, sums over ranks.cpu_group.
  Run(const Options& opt, const std::string& title, const Ranks& ranks);

  /// The run's trace (switched on by --trace): record spans into it.
  Trace& trace() { return trace_; }
  /// The track of the loop's own spans ("data wait"); default "compute".
  void set_step_track(const std::string& track) { step_track_ = track; }
  /// Extra fields for every metrics line ({"stages", 2}).
  void add_metric_fields(const MetricFields& fields);
  /// Sets one extra field of the metrics lines from now on: replaces the field of that name,
  /// or adds it. For values that change from epoch to epoch (a loss scale, skipped steps).
  void set_metric_field(const std::string& name, double value);
  /// Ranks that read different samples: the group's size unless set. Tensor-parallel ranks
  /// share their batch, so a program with world = tp x dp sets dp here (and passes a step's
  /// samples on one rank of each tensor-parallel group only): the global batch and the
  /// progress line's samples/s then count every sample once.
  void set_data_parallel_size(int ranks);
  /// Text the batch line ends with ("BatchNorm statistics over 32 samples").
  void set_batch_note(const std::string& note) { batch_note_ = note; }

  /// Starts epoch `epoch` (0-based) at learning rate `lr`, drawing batches from `loader`
  /// (already started with loader.start_epoch). The epoch runs loader.num_batches() steps,
  /// or opt.steps when that is smaller. Throws when the loader has no batch at all. The
  /// first call prints the batch line (with a group).
  void start_epoch(int epoch, double lr, data::DataLoader& loader);

  /// This rank's sums of the epoch in progress: what a checkpoint taken mid-epoch keeps so
  /// that the resumed epoch reports the same numbers as an uninterrupted one.
  struct EpochSums {
    std::int64_t steps = 0;    ///< steps done in the epoch
    double loss_sum = 0;       ///< sum of loss x samples
    std::int64_t correct = 0;  ///< samples classified right
    std::int64_t seen = 0;     ///< samples trained on
  };
  /// The sums of the epoch in progress on this rank.
  EpochSums epoch_sums() const { return {steps_, loss_sum_, correct_, seen_}; }
  /// start_epoch for an epoch resumed from a checkpoint at step sums.steps (the loader
  /// started at that batch): the epoch continues from `sums`.
  void resume_epoch(int epoch, double lr, data::DataLoader& loader, const EpochSums& sums);
  /// Every rank's epoch_sums() as one f64 {ranks, 4} tensor (steps, loss_sum, correct,
  /// seen), on every rank: a collective over `group` (a CPU group). Rank 0 saves it in a
  /// checkpoint, so that each rank of a resumed run finds its own row (epoch_sums_of).
  Tensor gather_epoch_sums(dist::ProcessGroup& group) const;
  /// Row `rank` of a gather_epoch_sums() tensor.
  static EpochSums epoch_sums_of(const Tensor& rows, int rank);
  /// Step 1 of every loop: the next batch, false when the epoch is over. The wait is
  /// recorded as a "data wait" span.
  bool next_batch(data::Batch& batch);
  /// After each step: its mean loss, its samples and, where the program has the logits,
  /// how many it classified right (-1: not counted; the epoch line then has no train_acc).
  /// Updates the progress line.
  void step(double loss, std::int64_t samples, std::int64_t correct = -1);
  /// Steps finished so far in the whole run.
  std::int64_t steps_done() const { return total_steps_; }
  /// Steps finished so far in this epoch.
  std::int64_t epoch_steps() const { return steps_; }
  /// Steps this epoch runs (see start_epoch).
  std::int64_t planned_steps() const { return planned_; }
  /// Seconds the last next_batch() waited for its batch.
  double last_data_wait_s() const { return last_wait_s_; }

  /// Ends the epoch's training: waits for the devices, stops the epoch's clock, erases the
  /// progress line. Call it before evaluating, so evaluation is not counted as training.
  void end_training();
  /// Ends the epoch: sums the training numbers over the ranks, prints the epoch line
  /// (rank 0) and writes the metrics line. The time since end_training() is traced as
  /// "evaluate".
  void end_epoch(const EvalResult& test);

  /// Writes the trace (every rank of the group must call it) and prints the `final:` line
  /// on rank 0. Returns 0, the program's exit status.
  int finish();

  /// Seconds since the run started.
  double elapsed_s() const;
  /// Seconds spent training (the epochs' step loops) so far.
  double train_time_s() const { return train_time_s_; }

 private:
  const Options& opt_;
  std::vector<Device> devices_;
  dist::ProcessGroup* group_;
  int world_ = 1;
  int data_parallel_ = 1;  // ranks that read different samples (world_ unless set)
  bool batch_line_due_ = false;  // printed by the first start_epoch (with a group)
  std::string batch_note_;
  double start_s_ = 0;
  Trace trace_;
  std::string step_track_ = "compute";
  MetricsWriter metrics_;
  MetricFields extra_fields_;
  ProgressLine progress_;

  data::DataLoader* loader_ = nullptr;
  int epoch_ = 0;
  double lr_ = 0, epoch_start_s_ = 0, training_end_s_ = 0, epoch_time_s_ = 0, last_wait_s_ = 0;
  double loss_sum_ = 0;
  std::int64_t correct_ = 0, seen_ = 0, steps_ = 0, planned_ = 0, total_steps_ = 0;
  std::int64_t resumed_steps_ = 0, resumed_seen_ = 0;  // of an epoch resumed mid-way
  bool counts_correct_ = true;

  double train_time_s_ = 0, trained_samples_ = 0;
  double last_train_loss_ = 0, last_test_acc_ = 0;
};

/// main()'s body for a program: runs `body`, and turns an exception into "error: ..." on
/// stderr and exit status 1.
int run_main(const std::function<int()>& body);

/// As run_main for a program started with mpirun: starts the distributed runtime first
/// (dist::Runtime), and when `body` throws on one rank ends the whole job with that rank's
/// message (dist::abort_job), so no rank is left waiting in a collective.
int run_distributed(int* argc, char*** argv, const std::function<int()>& body);

}  // namespace mgpu::app
