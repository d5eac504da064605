/// @file gpt_pipeline.h
/// @brief Lesson 12's GPT under DP × TP × PP: pipeline stages as processes, tensor
/// parallelism inside each stage, data parallelism across the pipelines.
///
/// The n_layer blocks are cut into S = p·v virtual stages of consecutive blocks (as even as
/// possible, the first stages one block longer); virtual stage s = c·p + r is chunk c of
/// pipeline rank r (pipe_schedule.h). The first virtual stage also holds the token and
/// position embeddings, the last one the final LayerNorm and the head. The head is tied to
/// the token table (lesson 12): with p > 1 the last stage keeps its own copy of the table,
/// named "lm_head.weight" (nanoGPT's second name for it), and after each step's backward the
/// two copies' gradients are summed with one send each way between the first and the last
/// stage, so both copies take the same update (Megatron-LM's embedding group).
///
/// Inside a stage the blocks are lesson 13's ParallelBlocks over the grid's TP group (whole
/// nn::Blocks when TP is 1) and the head is split by vocabulary (lesson 13's
/// vocabulary-parallel cross-entropy: the logits are never gathered). A micro-batch's
/// activations [b, T, C] go to the next virtual stage, and their gradients back, with
/// send/recv on the PP group (a message to the same rank, p = 1 with v > 1, stays local).
///
/// Data parallelism is DDP's averaging: after the pipeline has drained, every gradient this
/// rank holds is summed over the DP group in one all-reduce of their concatenation and
/// divided by DP (not bucketed, not overlapped with the backward; lesson 05 overlaps it,
/// lesson 10's ZeRO-1 would shard the optimizer state across the same group).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/nn/gpt.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/grid/grid.h"
#include "mgpu/parallel/pp/pipe_schedule.h"
#include "mgpu/parallel/tp/tensor_parallel.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::pp {

/// The blocks [begin, end) of virtual stage `stage` of `stages` (tp::shard_range's even
/// split of n_layer). Throws when a stage would get no block.
tp::ShardRange stage_blocks(std::int64_t n_layer, int stages, int stage);

/// How a step runs.
struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::one_f_one_b;  ///< the order of each pipeline rank
  int virtual_stages = 1;                             ///< v: model chunks per rank
  int micro_batches = 1;                              ///< m: micro-batches per step
};

/// When one op of a step ran on this rank (seconds since the step began, steady clock).
struct OpTime {
  PipeOp op;              ///< which op
  double start_s = 0;     ///< its input was there
  double end_s = 0;       ///< its output was computed (before it was sent)
};

/// What one training step measured on this rank.
struct PipelineStepReport {
  double loss = 0;                   ///< the batch's mean loss, averaged over DP (every rank)
  double span_s = 0;                 ///< step start to this rank's last op's end
  double busy_s = 0;                 ///< the sum of its ops' times
  std::vector<OpTime> ops;           ///< its ops in the order they ran
  std::int64_t messages = 0;         ///< point-to-point sends this rank posted
  std::int64_t message_bytes = 0;    ///< their bytes
  std::int64_t collectives = 0;      ///< collectives issued on its TP, DP and PP groups
  std::size_t peak_bytes = 0;        ///< peak bytes allocated above the step's start
  /// Idle over busy on the wall clock: (span - busy) / busy.
  double bubble() const { return busy_s > 0 ? (span_s - busy_s) / busy_s : 0.0; }
};

/// This rank's part of a GPT (see the file comment). Built on every rank of the grid from
/// the same full model (same seed); the full model is only read.
class GptPipeline {
 public:
  /// Cuts `full` for this rank's place in `grid`. Throws when the layout does not fit the
  /// model (more virtual stages than blocks; TP not dividing the heads) or the options are
  /// invalid (v > 1 without the interleaved schedule).
  GptPipeline(nn::GPT& full, const grid::ProcessGrid& grid, const PipelineOptions& options);
  GptPipeline(const GptPipeline&) = delete;
  GptPipeline& operator=(const GptPipeline&) = delete;

  /// One step over this replica's batch (ids and targets [B, T], i64; m must divide B):
  /// gradients zeroed, every op of this rank's schedule run, the tied table's gradient
  /// summed between the first and last stages, the gradients averaged over DP. Every rank
  /// of the grid calls it. The loss is the mean over the DP replicas' batches.
  PipelineStepReport train_step(const Tensor& ids, const Tensor& targets);

  /// This rank's parameters under the full model's names ("lm_head.weight" for the tied
  /// copy); split parameters hold this rank's TP part.
  std::vector<std::pair<std::string, nn::Parameter*>> named_parameters();
  /// The same parameters without their names (what an optimizer updates).
  std::vector<nn::Parameter*> parameters();
  /// Parameter elements this rank holds.
  std::int64_t num_parameters();
  /// This rank's model chunks: chunk c holds the blocks [begin, end).
  std::vector<tp::ShardRange> chunk_blocks() const;
  /// The order this rank runs each step.
  const std::vector<PipeOp>& order() const { return order_; }
  /// The options it was built with.
  const PipelineOptions& options() const { return options_; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  PipelineOptions options_;
  std::vector<PipeOp> order_;
};

}  // namespace mgpu::parallel::pp
