// Private to parallel_gpt*.cpp: what a ParallelGpt holds, and its pieces (the embedding,
// a chunk of blocks, the head and its loss) that the step runs.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "mgpu/parallel/ddp/ddp.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"
#include "mgpu/parallel/moe/expert_grads.h"

namespace mgpu::parallel::gpt {

class Parts;

// Under EP (grid's EP above 1): swaps `block`'s one-process MoE "mlp" child, if it has one,
// for an MoE over the grid's EP group holding this rank's experts, with the same weights
// and bias (moe_step.cpp). Nothing where EP is 1.
void place_experts(nn::Module& block, const grid::ProcessGrid& grid);

// What the last virtual stage keeps from a micro-batch's forward for its backward.
struct HeadSaved {
  Tensor hidden;  // ln_f's output [b·T, C]: the head's input
  Tensor grad;    // dL/dlogits (this rank's columns under a split head), already divided by m
  Shape shape;    // the head's input [b, T, C] (the whole sequence under SP)
};

// A [B, T] batch of token ids held on the host, row-major: a loader's own copy, so the step
// checks and routes its ids without reading a tensor (a wait for a GPU).
struct HostIds {
  std::vector<std::int64_t> values;
  std::int64_t B = 0, T = 0;

  // A [B, T] tensor's ids: one read of its data.
  static HostIds read(const Tensor& ids);
  // Rows [b0, b1).
  HostIds rows(std::int64_t b0, std::int64_t b1) const;
  // Columns `columns` of every row: [B, columns.size()].
  HostIds columns(const std::vector<std::int64_t>& columns) const;
  // [B, T] i64 on `device`: a copy to it, no read.
  Tensor on(const Device& device) const;
};

struct ParallelGpt::Impl {
  GptPlan plan;
  const grid::ProcessGrid* grid = nullptr;
  nn::GPTConfig cfg;
  int p = 1, v = 1, m = 1, S = 1, pp_rank = 0;
  bool first = false, last = false;  // holds virtual stage 0 / S - 1
  std::int64_t vocab = 0, padded = 0, C = 0;
  tp::ShardRange rows;  // this TP rank's rows of the padded vocabulary
  std::shared_ptr<Parts> parts;
  std::shared_ptr<nn::Module> wte, wpe, ln_f;
  std::shared_ptr<nn::Module> head;  // the table the head reads: wte, or the last stage's copy
  std::vector<std::vector<std::shared_ptr<nn::Module>>> chunks;  // [chunk] -> its blocks
  std::vector<tp::ShardRange> chunk_ranges;
  std::vector<std::shared_ptr<cp::RingAttentionCore>> cores;  // one per block, under CP
  cp::HybridGroups hybrid;  // the hybrid core's Ulysses and ring groups (unset otherwise)
  std::vector<pp::PipeOp> order;
  std::unique_ptr<DistributedDataParallel> ddp;  // GradSync::ddp over a data group of 2+
  std::vector<moe::MoE*> moes;                // this rank's MoE layers, in block order
  moe::ExpertGradGroups expert_rule;          // lesson 16's reductions for this data rank
  std::vector<std::string> dense_names, expert_names;  // the gradients of each reduction
  // Per step.
  std::map<int, HeadSaved> head_saved;  // by micro-batch
  std::map<int, Tensor> local_mail;     // messages to this same rank, by tag
  std::vector<std::int64_t> positions;  // this CP rank's positions of a window of positions_T
  std::int64_t positions_T = -1;
  bool measure_kept = false;            // the forward being run is micro-batch 0's
  std::size_t kept = 0, logits_bytes = 0;

  dist::ProcessGroup& tp_group() const { return grid->group(grid::Axis::tp); }
  dist::ProcessGroup& cp_group() const { return grid->group(grid::Axis::cp); }
  dist::ProcessGroup& dp_group() const { return grid->group(grid::Axis::dp); }
  dist::ProcessGroup& pp_group() const { return grid->group(grid::Axis::pp); }
  dist::ProcessGroup& data_group() const { return grid->data_group(); }

  // This CP rank's positions of a window of T (all of 0..T-1 without CP), cached by T.
  const std::vector<std::int64_t>& positions_of(std::int64_t T);
  // Columns `positions_of(T)` of a [B, T] batch of ids: [B, T_r] (the batch itself
  // without CP).
  HostIds local_columns(const HostIds& ids);
  // The tokens a stage's activations cover: T_r under CP, T/TP under SP.
  std::int64_t activation_T(std::int64_t T_local) const;

  // ids_r [b, T_r] -> the first block's input [b, T_act, C].
  Tensor embed(const HostIds& ids);
  void embed_backward(const Tensor& dx);
  // A chunk's blocks, forward and backward; the forward adds to `kept` under measure_kept.
  Tensor chunk_forward(int chunk, Tensor x);
  Tensor chunk_backward(int chunk, Tensor dx);
  // ln_f and the head: the last block's output -> the logits (this rank's columns under a
  // split head), keeping the head's input under `micro`; the logits' gradient -> the last
  // block's output's.
  Tensor head_forward(int micro, const Tensor& x);
  Tensor head_backward(int micro, const Tensor& grad_logits);
  // One micro-batch's mean loss over its tokens ([1] f64 on the logits' device: not read
  // here), and its gradient (divided by m) kept for head_backward.
  Tensor loss(int micro, const Tensor& logits, const Tensor& targets);
  // This TP rank's rows of the (padded) tied table, the padding rows zero (a copy).
  Tensor head_rows();

  // A step: checks the batch, then runs ddp_step or pipeline_step.
  StepReport step(const HostIds& ids, const HostIds& targets);
  // The step, for a one-stage plan under DDP and for the pipeline's schedule.
  StepReport ddp_step(const HostIds& ids, const HostIds& targets);
  StepReport pipeline_step(const HostIds& ids, const HostIds& targets);
  // The ids the one-stage forward looks up (ddp_step's; DDP hands Parts::forward their
  // tensor, the same values on the device).
  const HostIds* step_ids = nullptr;
  // Under SP: the replicated parameters' partial gradients summed over the TP group.
  void reduce_replicated_grads();
  // With MoE layers, after the backward: the dense gradients over the data group, the
  // experts' over the expert-data group, each scaled by expert_rule; then the balancing
  // biases from the load summed over the data group (moe_step.cpp).
  void reduce_moe_grads();
  void update_moe_biases();
  // The MoE layers' auxiliary losses summed, this rank's tokens (0 without experts).
  double moe_aux_loss() const;
};

// The parts this rank holds, registered under the full model's names. As a module it is
// the model of a one-stage plan (what DDP wraps): forward(ids_r) -> this rank's logits,
// backward(dL/dlogits) -> every parameter's gradient.
class Parts : public nn::Module {
 public:
  explicit Parts(ParallelGpt::Impl& impl) : impl_(&impl) {}
  void add(const std::string& name, std::shared_ptr<nn::Module> child) {
    register_module(name, std::move(child));
  }
  Tensor forward(const Tensor& ids) override;
  Tensor backward(const Tensor& grad_logits) override;
  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("ParallelGpt's parts are not cloned"); }
  std::string describe() const override { return "ParallelGpt(" + impl_->plan.str() + ")"; }

 private:
  ParallelGpt::Impl* impl_;
};

}  // namespace mgpu::parallel::gpt
