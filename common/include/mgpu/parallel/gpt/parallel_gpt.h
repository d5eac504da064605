/// @file parallel_gpt.h
/// @brief A plan (gpt_plan.h) applied to lesson 12's GPT: this rank's part of the model,
/// and the training step that runs it on the grid.
///
/// The parts, named as the full model's parameters:
///   - the first virtual stage: the token table (whole, or this TP rank's rows under
///     Vocab::split, one all-reduce per lookup) and the position table, read at this CP
///     rank's positions (all of 0..T-1 without CP); under SP the result is cut along T;
///   - the blocks of this rank's virtual stages: whole nn::Blocks where neither TP, CP nor
///     SP splits them, else tp::ParallelBlocks over the TP group (lesson 13), whose
///     attention core is lesson 14's ring over the CP group where CP is above 1;
///   - the last virtual stage: the final LayerNorm and the head tied to the token table:
///     whole logits and the softmax cross-entropy (Vocab::replicated), or this TP rank's
///     columns of the logits and the vocabulary-parallel cross-entropy (Vocab::split; the
///     logits are never gathered). With a pipeline the last stage keeps a copy of the table,
///     "lm_head.weight", and the two copies' gradients are summed after the backward.
///
/// The step: the pipeline's schedule (lesson 15; with one stage and one micro-batch,
/// forward then backward), activations and their gradients passed with send/recv on the
/// PP group, each micro-batch's loss scaled by 1/m, then the gradients averaged over the
/// data group (the CP x DP ranks): by lesson 05's DDP during the backward (GradSync::ddp,
/// one stage, one micro-batch) or in one all-reduce after it. Under SP the replicated
/// parameters' partial gradients are summed over the TP group (lesson 13, task 4).
///
/// A model with MoE layers (moe_gpt.h): under EP each rank's blocks hold an MoE over its EP
/// group with its experts (the full model's weights); the step adds the layers' auxiliary
/// losses to the loss's gradient (StepReport::aux_loss), reduces the expert gradients as
/// lesson 16's expert_grad_groups says (summed over the expert-data group, scaled) and the
/// dense ones over the data group, then updates each layer's balancing bias from the load
/// summed over the data group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/data/text.h"
#include "mgpu/dist/traffic.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/cp/ring_attention_core.h"
#include "mgpu/parallel/gpt/gpt_plan.h"
#include "mgpu/parallel/grid/grid.h"
#include "mgpu/parallel/moe/moe_layer.h"
#include "mgpu/parallel/pp/pipe_schedule.h"
#include "mgpu/parallel/tp/tensor_parallel.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::gpt {

/// When one op of a step ran on this rank (seconds since the step began, steady clock).
struct OpTime {
  pp::PipeOp op;          ///< which op
  double start_s = 0;     ///< its input was there
  double end_s = 0;       ///< its output was computed (before it was sent)
};

/// Collectives issued in a step on each of this rank's groups.
struct GroupCounts {
  std::int64_t tp = 0;    ///< on the tensor-parallel group
  std::int64_t cp = 0;    ///< on the context-parallel group (with the hybrid's two sub-groups)
  std::int64_t dp = 0;    ///< on the data-parallel group
  std::int64_t pp = 0;    ///< between pipeline stages
  std::int64_t data = 0;  ///< on the data group (the CP x DP ranks; the DP group where CP is 1)
  std::int64_t ep = 0;    ///< on the EP group: the MoE layers' all-to-alls (3 per layer in
                          ///< the forward, 2 in the backward); 0 where EP is 1
  std::int64_t expert_data = 0;  ///< on the expert-data group (the experts' gradients); 0
                                 ///< where EP is 1 (they join the data group's all-reduce)
};

/// What one training step measured on this rank.
struct StepReport {
  double loss = 0;                   ///< the mean loss over every token of every replica's batch:
                                     ///< the cross-entropy alone, without aux_loss
  double aux_loss = 0;               ///< the MoE layers' auxiliary losses, summed over the
                                     ///< layers, averaged over the data group (0 without)
  double span_s = 0;                 ///< step start to this rank's last op's end
  double busy_s = 0;                 ///< the sum of its ops' times
  std::vector<OpTime> ops;           ///< its ops in the order they ran
  std::int64_t messages = 0;         ///< point-to-point sends this rank posted on the PP group
  std::int64_t message_bytes = 0;    ///< their bytes
  std::int64_t collectives = 0;      ///< collectives on all of its groups together
  GroupCounts by_group;              ///< the same, per group
  dist::Traffic traffic;             ///< what this rank issued on all its groups and the bytes
                                     ///< it sent, by kind (dist/traffic.h; the hybrid's groups,
                                     ///< the PP group's sends, the EP and expert-data groups
                                     ///< included)
  dist::Traffic cp_traffic;          ///< the part of `traffic` on the CP group (and the
                                     ///< hybrid's Ulysses and ring groups): attention's
  std::size_t peak_bytes = 0;        ///< peak bytes allocated above the step's start, whole step
  std::size_t backward_peak_bytes = 0;  ///< the same up to the end of the backward
  std::size_t kept_bytes = 0;        ///< what the blocks kept for the backward (micro-batch 0)
  std::size_t logits_bytes = 0;      ///< this rank's logits of one micro-batch
  std::int64_t host_reads = 0;       ///< host reads of tensor data in the step (host_reads.h)
  /// Idle over busy on the wall clock: (span - busy) / busy.
  double bubble() const { return busy_s > 0 ? (span_s - busy_s) / busy_s : 0.0; }
};

/// This rank's part of a GPT under a plan. Built on every rank of the grid, at the same
/// point, from the same full model (the same seed); the full model is only read.
class ParallelGpt {
 public:
  /// Cuts `full` for this rank's place in `grid` (whose shape must be plan.shape). Throws
  /// on every rank when the plan does not fit (GptPlan::check). With GradSync::ddp the
  /// construction is collective over the data group (DDP copies rank 0's weights).
  ParallelGpt(nn::GPT& full, const GptPlan& plan, const grid::ProcessGrid& grid);
  ParallelGpt(const ParallelGpt&) = delete;
  ParallelGpt& operator=(const ParallelGpt&) = delete;
  ~ParallelGpt();

  /// One step over this replica's batch (ids and targets [B, T], i64, the whole windows:
  /// each CP rank takes its own positions; the micro-batches must divide B): gradients
  /// zeroed, this rank's schedule run, the tied copies' gradients summed, the gradients
  /// averaged over the data group. Every rank of the grid calls it.
  /// The tensors' ids are read to the host once each (to check and route them): two host
  /// reads; the TextBatch form below reads none.
  StepReport train_step(const Tensor& ids, const Tensor& targets);
  /// The same step on a loader's batch, whose ids the host already holds (TextBatch's
  /// input_ids and target_ids: no read of the tensors; a batch without them is read).
  StepReport train_step(const data::TextBatch& batch);

  /// This rank's parameters under the full model's names ("lm_head.weight" for the last
  /// stage's copy of the tied table); split parameters hold this rank's part.
  std::vector<std::pair<std::string, nn::Parameter*>> named_parameters();
  /// The same parameters without their names (what an optimizer updates).
  std::vector<nn::Parameter*> parameters();
  /// Parameter elements this rank holds.
  std::int64_t num_parameters();
  /// The plan it applies.
  const GptPlan& plan() const;
  /// The grid it runs on.
  const grid::ProcessGrid& grid() const;
  /// The full model's sizes.
  const nn::GPTConfig& config() const;
  /// This rank's model chunks: chunk c holds the blocks [begin, end).
  std::vector<tp::ShardRange> chunk_blocks() const;
  /// The order this rank runs each step.
  const std::vector<pp::PipeOp>& order() const;
  /// This TP rank's rows of the vocabulary padded to a multiple of TP, and the real size.
  tp::ShardRange vocab_rows() const;
  /// The CP attention cores' measurements summed over this rank's layers (work, CPU
  /// seconds and kept bytes summed, peaks the largest); all zero without CP.
  cp::CoreStats attention_stats() const;
  /// attention_stats() of every rank of this rank's CP group, in CP rank order (work and
  /// CPU seconds; peaks this rank's own). Collective over the CP group: every rank calls it.
  std::vector<cp::CoreStats> attention_stats_by_cp_rank() const;
  /// This rank's MoE layers in block order (empty for a model without experts): their
  /// stats() are the last step's routing of this rank's tokens.
  std::vector<moe::MoE*> moe_layers() const;
  /// The DDP buckets' sizes in bytes after the last step (GradSync::ddp); empty otherwise.
  std::vector<std::size_t> ddp_bucket_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mgpu::parallel::gpt
