/// @file pipeline.h
/// @brief Lesson 03's contract: model parallelism. A Sequential split into stages on
/// different devices, the naive schedule, and the GPipe micro-batch pipeline. The graded
/// tests compile against exactly these declarations.
///
/// K stages, M micro-batches. GPipe runs every forward, then every backward; stage k does
/// forward m at clock tick m + k and is idle while the pipeline fills and drains:
///
///     tick     0  1  2  3  4  5  6  7  8  9 10 11 12 13
///     stage 0  F0 F1 F2 F3 .  .  .  .  .  .  B3 B2 B1 B0        K = 4, M = 4:
///     stage 1  .  F0 F1 F2 F3 .  .  .  .  B3 B2 B1 B0 .         idle fraction
///     stage 2  .  .  F0 F1 F2 F3 .  .  B3 B2 B1 B0 .  .         (K-1)/(M+K-1) = 3/7
///     stage 3  .  .  .  F0 F1 F2 F3 B3 B2 B1 B0 .  .  .
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/pp/pipe_schedule.h"
#include "mgpu/tensor.h"

namespace mgpu::lesson03 {

// ---- Task 1: the stage split and the copies between devices (stage.cpp) ----------------------

/// Consecutive layers of a Sequential that live on one device. The layers are the model's
/// own (shared, not copied): splitting moves them, and the model's parameters() still
/// lists every one of them, wherever it now lives.
struct Stage {
  std::vector<std::shared_ptr<nn::Module>> layers;
  Device device;
  std::size_t first_layer = 0;  ///< index of layers[0] in the model

  /// The stage's layers in order. x must already be on `device`.
  Tensor forward(const Tensor& x);
  /// The stage's layers' backward in reverse order. grad_out must already be on `device`.
  Tensor backward(const Tensor& grad_out);
};

/// Splits `model` into K = devices.size() stages: stage k holds layers
/// [boundaries[k-1], boundaries[k]) (with boundaries[-1] = 0 and boundaries[K-1] =
/// model.size()), moved to devices[k]. `boundaries` lists the K-1 layer indices where a new
/// stage starts, strictly increasing, each in [1, model.size() - 1]. Throws otherwise.
std::vector<Stage> split_model(nn::Sequential& model, const std::vector<std::size_t>& boundaries,
                               const std::vector<Device>& devices);

/// The naive schedule for one batch: x is copied to stage 0's device, each stage runs in
/// turn and its output is copied to the next stage's device. Returns the last stage's output.
Tensor forward_through(std::vector<Stage>& stages, const Tensor& x);
/// The backward of forward_through: grad_out goes to the last stage, each stage runs its
/// backward in turn (last to first), the gradient copied to the previous stage's device.
/// Returns d(loss)/d(x) on stage 0's device.
Tensor backward_through(std::vector<Stage>& stages, const Tensor& grad_out);

/// Boundaries that give every stage about the same number of parameters (given): the
/// program's default when --split is not set.
std::vector<std::size_t> balanced_boundaries(nn::Sequential& model, int num_stages);

// ---- Task 2: the GPipe schedule (schedule.cpp) -----------------------------------------------

/// Forward or backward, and one unit of work: the forward or backward of micro-batch
/// `micro` on one stage. Both are the library's pipeline vocabulary
/// (mgpu/parallel/pp/pipe_schedule.h), which lesson 15's pipeline across processes speaks
/// too; here PipeOp's `chunk` is always 0: one piece of the model per stage.
using parallel::pp::Pass;
using parallel::pp::PipeOp;

/// A schedule on a clock: ticks[t][k] is what stage k does at tick t (nullopt = idle).
/// Every op takes one tick; it is the schedule's own step count, not wall time.
struct Schedule {
  std::string name;
  int num_stages = 0;
  int num_micro = 0;
  std::vector<std::vector<std::optional<PipeOp>>> ticks;

  /// Stage k's ops in the order it runs them (its column, idle ticks skipped).
  std::vector<PipeOp> stage_ops(int k) const;
  /// Idle (stage, tick) slots over all slots.
  double idle_fraction() const;
  /// The schedule as text, one row per stage: "F0 F1 .  B1 B0".
  std::string draw() const;
};

/// GPipe: forward m on stage k at tick m + k; after the last forward, the backwards in
/// reverse: backward m on stage k at tick (M + K - 1) + (M - 1 - m) + (K - 1 - k).
/// 2 (M + K - 1) ticks in all. Throws unless K >= 1 and M >= 1.
Schedule gpipe_schedule(int num_stages, int num_micro);

/// The naive schedule (given): one micro-batch at a time goes forward through every stage
/// and back before the next starts, so exactly one stage works at any tick. 2 K M ticks.
Schedule naive_schedule(int num_stages, int num_micro);

/// 1F1B on the clock (given): each stage's one_f_one_b_order, every op placed at the
/// earliest tick its input allows (the library's parallel::pp::simulate). Same length and idle fraction as GPipe; stage k holds at
/// most K - k micro-batches' activations instead of M.
Schedule one_f_one_b_schedule(int num_stages, int num_micro);

/// The most micro-batches whose activations stage k holds at once under `s` (forwards done
/// whose backward has not run yet): GPipe M, 1F1B K - k.
int max_in_flight(const Schedule& s, int k);

/// Throws unless `s` is a valid pipeline schedule: every (op, micro-batch, stage) exactly
/// once, forward m on stage k after forward m on stage k - 1, backward m on stage k after
/// backward m on stage k + 1 (or, on the last stage, after its forward m).
void check_schedule(const Schedule& s);

// ---- Task 4: the 1F1B order (one_f_one_b.cpp) -------------------------------------------------

/// Stage k's ops under 1F1B, one_f_one_b_order(K, M, k): the library declares it
/// (mgpu/parallel/pp/pipe_schedule.h: a warm-up of min(K - 1 - k, M) forwards, then one
/// forward and one backward while forwards remain, then the remaining backwards), your
/// one_f_one_b.cpp defines it, and the library's pipeline schedules run its reference.
using parallel::pp::one_f_one_b_order;

// ---- Task 3: micro-batches and gradient accumulation (accumulate.cpp) -------------------------

/// Rows of each of M micro-batches of a batch of B rows: as equal as possible, the first
/// B % M one row longer (torch.tensor_split): 10 rows, M = 4 -> {3, 3, 2, 2}. Throws unless
/// 1 <= M <= B (every micro-batch needs a row).
std::vector<std::int64_t> micro_batch_sizes(std::int64_t batch, int num_micro);

/// The loss of one micro-batch and the gradient that starts its backward.
struct MicroLoss {
  /// This micro-batch's share of the batch's mean loss: mean loss * rows / batch_rows.
  double weighted_loss = 0;
  /// d(weighted_loss)/d(logits). Summed over the micro-batches, the parameter gradients
  /// are the gradients of the mean loss over the whole batch.
  Tensor grad;
};

/// Cross-entropy of `logits` [rows, C] against `labels` [rows], weighted by
/// rows / batch_rows (1/M when the micro-batches are equal, not when they are not).
MicroLoss micro_batch_loss(const Tensor& logits, const Tensor& labels, std::int64_t batch_rows);

// ---- The pipeline runner (pipeline.cpp, given) ------------------------------------------------

/// When one op ran, on the host's steady clock (microseconds since the step began).
struct OpTiming {
  int stage = 0;
  PipeOp op;
  double start_us = 0, end_us = 0;
};

/// What one training step measured.
struct StepStats {
  double loss = 0;  ///< mean over the whole batch
  double span_us = 0;  ///< first op's start to last op's end
  std::vector<OpTiming> ops;
  /// Busy time (sum of its ops) and idle time (span - busy) of each stage.
  std::vector<double> busy_us, idle_us;
  /// Idle time over K * span: the measured bubble fraction.
  double bubble_fraction() const;
  /// Per stage, the most micro-batches whose forward contexts its layers held at once
  /// (nn::Module::saved_forwards after each forward): GPipe M, 1F1B at most K - k.
  std::vector<int> peak_live_contexts;
  /// Per stage, the peak of the bytes allocated on its device during the step above what
  /// was allocated when the step began: the saved activations, plus the gradients and the
  /// copies in flight. Stages that share a device share the count.
  std::vector<double> peak_step_bytes;
};

/// Runs a Schedule over the stages: one worker thread per stage that executes its ops in
/// its schedule order, each op waiting for its input (the activation from the stage before,
/// or the gradient from the stage after). Micro-batch m's forward and backward run in
/// nn::ContextScope(m), so any valid schedule runs (GPipe, 1F1B). On CUDA each worker
/// computes on its device's compute stream and sends on the neighbour's communication
/// stream.
class Pipeline {
 public:
  explicit Pipeline(std::vector<Stage> stages);

  /// One training step over a batch: split into s.num_micro micro-batches, run `s`, and
  /// accumulate every micro-batch's gradients into the parameters (zeroed first). x and
  /// labels may live anywhere. Resets each stage device's peak memory counter. Throws a
  /// clear error instead of hanging when the schedule waits for something that never comes.
  StepStats train_step(const Tensor& x, const Tensor& labels, const Schedule& s);
  /// Evaluation: forward_through, one stage after the other.
  Tensor forward(const Tensor& x);

  std::vector<Stage>& stages() { return stages_; }
  /// Seconds a worker waits for an input before it gives up (default 60).
  void set_timeout_s(double s) { timeout_s_ = s; }

 private:
  std::vector<Stage> stages_;
  double timeout_s_ = 60;
};

/// The measured ops as text, one row per stage, `width` columns over the step's span:
/// F/B where a forward/backward ran, '.' where the stage was idle.
std::string draw_timeline(const StepStats& stats, int num_stages, int width = 72);

}  // namespace mgpu::lesson03

namespace mgpu::app {
class Trace;  // mgpu/app/trace.h
}  // namespace mgpu::app

namespace mgpu::lesson03 {

/// Records the measured ops of training step `step`, which began at `step_start_s`
/// (app::now_s()), into `trace`: one track per stage ("stage 1 on cpu:1"), one span per op
/// named "F3"/"B3".
void trace_step(app::Trace& trace, const StepStats& stats, double step_start_s,
                const std::vector<Device>& devices, std::int64_t step);

}  // namespace mgpu::lesson03
