/// @file parallel_block.h
/// @brief A GPT block split over a tensor-parallel group, as Megatron-LM splits it
/// (Shoeybi et al. 2019), with optional sequence parallelism (Korthikanti et al. 2022).
///
/// Attention is split by heads: rank r of P owns heads [r·H/P, (r+1)·H/P), the matching
/// rows of c_attn's q, k and v parts (column-parallel) and the matching columns of c_proj
/// (row-parallel). The MLP is lesson 11's: c_fc column-parallel, GELU, c_proj row-parallel.
/// Each sub-block (attention, MLP) communicates exactly once in the forward and once in the
/// backward:
///
///   tensor parallel (TP):  x whole on every rank
///     forward:  ln -> [f: identity] -> column -> ... -> row -> [g: all-reduce] -> + bias
///     backward: the mirror: g's identity, then f's all-reduce of the input's gradient
///   sequence parallel (SP): the block's input and output cut along T (rank r keeps tokens
///     [r·T/P, (r+1)·T/P)); the LayerNorms and residual sums see only those tokens
///     forward:  ln -> [all-gather along T] -> column -> ... -> row -> [reduce-scatter along T]
///     backward: all-gather of the output's gradient, reduce-scatter of the input's
///
/// Under SP each rank's LayerNorm weights and biases, and the row-parallel biases, see only
/// its tokens: their gradients are partial and must be summed over the group
/// (all_reduce_replicated_grads). Parameters keep the unsplit block's names.
///
/// Lesson 13 defines the functions of tasks 1-4 (lessons/13_tp_sp/: head_split.cpp,
/// vocab_cross_entropy.cpp, sequence_parallel.cpp, replicated_grads.cpp); the library
/// compiles their reference (solutions/13_tp_sp/). The modules built from them are the
/// library's (common/src/parallel/tp/parallel_block.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/layer.h"
#include "mgpu/parallel/attention_core.h"
#include "mgpu/parallel/tp/tensor_parallel.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::tp {

// ---- Task 1: attention split by heads (head_split.cpp) ----------------------------------------

/// The heads [begin, end) rank `rank` of `tp` owns: n_head / tp whole heads, in rank order.
/// Throws (one error naming both numbers) unless tp divides n_head.
ShardRange head_shard(std::int64_t n_head, int tp, int rank);

/// This rank's rows of a fused c_attn tensor, `full` [3C] or [3C, in] (q's C rows, then
/// k's, then v's): the rows of heads `heads` (head_dim values each) of q, then of k, then
/// of v, [3·heads.size()·head_dim, ...], copied.
Tensor qkv_head_rows(const Tensor& full, ShardRange heads, std::int64_t head_dim);

// ---- The split block (common/src/parallel/tp/parallel_block.cpp) -----------------------------

/// The row-parallel half of a Megatron pair without its communication: parameters
/// "weight" [out, in_r] (columns in_r of the full layer's) and "bias" [out] (whole,
/// replicated). forward gives this rank's partial product x_r W_r^T and adds no bias: the
/// owner adds it once, after the sum over the group.
class RowShardLinear : public nn::Layer<RowShardLinear, Tensor> {
 public:
  /// Columns shard_range(in, P, r) of `full`'s weight and its whole bias (it must have one).
  RowShardLinear(nn::Linear& full, ShardRange input_range);
  /// x_r [N, in_r] -> [N, out], a partial sum. No communication, no bias.
  Tensor forward(const Tensor& x) override;
  /// dy [N, out] -> dx_r [N, in_r]; adds the weight's gradient (not the bias's) and fires
  /// the weight's grad-ready hooks (the block fires the bias's after adding its share).
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
  /// W_r [out, in_r].
  nn::Parameter& weight() { return parameter_at(0); }
  /// b [out], the same on every rank.
  nn::Parameter& bias() { return parameter_at(1); }

 private:
  std::int64_t in_ = 0, out_ = 0;
};

/// This rank's heads of a CausalSelfAttention: children "c_attn" (Linear(C, 3·C/P), the
/// q, k and v rows of its heads) and "c_proj" (RowShardLinear over the same C/P features).
/// Input [B, T, C] (whole), output [B, T, C]: a partial sum, before the group's sum and the
/// bias. No communication of its own; its attention core (attention_core.h) runs q, k and v
/// of its heads: lesson 12's over the positions given, unless set_core() gives another
/// (lesson 14's ring over a context-parallel group). Throws when P does not divide the head
/// count.
class ParallelSelfAttention : public nn::Module {
 public:
  /// Cuts `full` for rank group.rank() of group.size().
  ParallelSelfAttention(nn::CausalSelfAttention& full, dist::ProcessGroup& group);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<nn::Module> clone() const override;
  std::string describe() const override;
  /// Heads this rank owns (n_head / P).
  std::int64_t local_heads() const { return heads_; }
  /// The heads [begin, end) this rank owns.
  ShardRange head_range() const { return heads_range_; }
  /// The output projection, whose bias the owner adds after the sum.
  RowShardLinear& c_proj() { return static_cast<RowShardLinear&>(*child_at(1)); }
  /// Sequence parallelism's re-gather (Megatron-LM's): with a group, forward takes this
  /// rank's tokens [B, T/P, C], all-gathers them itself for c_attn and keeps only them;
  /// backward all-gathers them again for c_attn's weight gradient (one more collective)
  /// and returns the gradient of the gathered input, [B, T, C]. nullptr (the default):
  /// forward takes the whole [B, T, C] and c_attn keeps it. Set it between steps only.
  void set_regather(dist::ProcessGroup* group) { regather_ = group; }
  /// The attention core q, k and v of its heads go through (a LocalAttentionCore unless
  /// set). Set it between steps only.
  void set_core(std::shared_ptr<AttentionCore> core);
  /// See set_core().
  AttentionCore& core() const { return *core_; }

 protected:
  /// Copies everything (clone() then gives the copy a core of its own, keeping nothing).
  ParallelSelfAttention(const ParallelSelfAttention&) = default;
  void clear_saved_self() override {
    saved_.clear();
    core_->clear_saved();
  }
  std::size_t saved_self() const override { return saved_.size(); }

 private:
  struct Saved {
    Tensor x_r;  // this rank's tokens of the input, under the re-gather only
    std::int64_t batch = 0, time = 0;
  };
  std::int64_t embd_ = 0, heads_ = 0, head_dim_ = 0;
  ShardRange heads_range_;
  dist::ProcessGroup* regather_ = nullptr;
  std::shared_ptr<AttentionCore> core_;
  nn::SavedContexts<Saved> saved_;
};

/// This rank's slice of a GPT MLP: "c_fc" (Linear(C, 4C/P), rows of the full c_fc),
/// "gelu", "c_proj" (RowShardLinear). [B, T, C] whole in, a partial sum out.
class ParallelMLP : public nn::Layer<ParallelMLP, Tensor> {
 public:
  /// Cuts `full` (its hidden features by shard_range(4C, P, r)).
  ParallelMLP(nn::MLP& full, dist::ProcessGroup& group);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
  /// The output projection, whose bias the owner adds after the sum.
  RowShardLinear& c_proj() { return static_cast<RowShardLinear&>(*child_at(2)); }
  /// Sequence parallelism's re-gather, as ParallelSelfAttention::set_regather, for c_fc.
  void set_regather(dist::ProcessGroup* group) { regather_ = group; }

 private:
  std::int64_t embd_ = 0;
  dist::ProcessGroup* regather_ = nullptr;
};

/// A GPT block over a tensor-parallel group: children "ln_1" (replicated), "attn"
/// (ParallelSelfAttention), "ln_2" (replicated), "mlp" (ParallelMLP), named as the full
/// block's. Without SP: input and output [B, T, C], whole on every rank; 2 all-reduces of
/// B·T·C values in the forward and 2 in the backward (none over a group of one rank). With
/// SP: input and output [B, T/P, C], this rank's tokens (P must divide T); 2 all-gathers and
/// 2 reduce-scatters of B·T·C values (the gathered side) each way. The attention's core is
/// attn's (ParallelSelfAttention::set_core): with lesson 14's ring core and a TP group of
/// one rank, this is a context-parallel block whose only communication is the ring's.
/// A block whose "mlp" is not an nn::MLP (lesson 16's MoE) keeps a copy of it whole, run on
/// every rank on the whole input (replicated, without SP): only attention is split then.
class ParallelBlock : public nn::Layer<ParallelBlock> {
 public:
  /// Cuts `full` for rank group.rank() of group.size(); `group` must outlive the block.
  /// Throws for SP when full's "mlp" is not an nn::MLP.
  ParallelBlock(nn::Block& full, dist::ProcessGroup& group, bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
  /// Whether the LayerNorm regions are cut along the sequence.
  bool sequence_parallel() const { return sp_; }
  /// The tensor-parallel group.
  dist::ProcessGroup& group() const { return *group_; }
  /// The dotted names of the parameters every rank holds whole (the LayerNorms and the
  /// row-parallel biases): under SP their gradients are partial over the group.
  std::vector<std::string> replicated_parameter_names();
  /// Under SP, Megatron-LM's re-gather: the inputs of c_attn and c_fc are kept as this
  /// rank's T/P tokens and all-gathered again in the backward, instead of kept gathered:
  /// 2·N·C·(P−1)/P fewer values kept per block, for 2 more all-gathers of B·T·C values in
  /// each backward (4 + 6 collectives per block). Throws when `on` without SP. Off by
  /// default; set it between steps only.
  void set_regather_in_backward(bool on);
  /// Whether the column products' inputs are gathered again in the backward.
  bool regather_in_backward() const { return regather_; }
  /// attn's attention core (ParallelSelfAttention::set_core).
  void set_attention_core(std::shared_ptr<AttentionCore> core);
  /// See set_attention_core().
  AttentionCore& attention_core() const;

 private:
  // One residual branch: ln (child i), then the split sub-block (child i + 1), whose
  // partial output is summed over the group (all-reduce, or reduce-scatter under SP).
  Tensor branch_forward(std::size_t i, RowShardLinear& proj, const Tensor& x);
  Tensor branch_backward(std::size_t i, RowShardLinear& proj, const Tensor& grad_out);
  dist::ProcessGroup* group_;
  bool sp_ = false;
  bool regather_ = false;
  bool whole_mlp_ = false;  // "mlp" is a copy of the full block's, not a ParallelMLP
};

// ---- Task 3: sequence parallelism's collectives (sequence_parallel.cpp) -----------------------

/// x [B, T, C] (whole) -> this rank's tokens [B, T/P, C]: [r·T/P, (r+1)·T/P). No
/// communication; throws unless P divides T. (The library's: how the tests and programs
/// cut a batch.)
Tensor scatter_sequence(const Tensor& x, dist::ProcessGroup& group);
/// The inverse: every rank's [B, T/P, C] -> [B, T, C] on every rank (one all-gather).
Tensor gather_sequence(const Tensor& x_r, dist::ProcessGroup& group);
/// x [B, T, C], a partial sum on every rank -> this rank's tokens of the group's sum,
/// [B, T/P, C] (one reduce-scatter).
Tensor reduce_scatter_sequence(const Tensor& x, dist::ProcessGroup& group);

// ---- Task 4: the replicated gradients (replicated_grads.cpp) -----------------------------------

/// Sums the gradients of the parameters named in `names` over `group`, in one all-reduce
/// of their concatenation: what SP needs for the LayerNorms and the row-parallel biases
/// (each rank saw only its own tokens). Forgetting it leaves every replica with a
/// different, partial gradient, and the replicas drift apart after the first step.
void all_reduce_replicated_grads(nn::Module& model, const std::vector<std::string>& names,
                                 dist::ProcessGroup& group);


// ---- Task 2: the vocabulary-parallel cross-entropy (vocab_cross_entropy.cpp) ------------------

/// The padded vocabulary: the smallest multiple of P at or above `vocab` (Megatron pads
/// so every rank owns vocab_padded / P rows; the padding rows are never a target and
/// their logits are set far below every real one).
std::int64_t padded_vocab(std::int64_t vocab, int tp);

/// The mean cross-entropy of logits split by vocabulary: logits_r [N, V/P] holds the
/// columns `range` of the full [N, V] logits (V padded); labels [N] (i64, global ids).
/// Two all-reduces: the N row maxima (max), then the N sums of exponentials beside the N
/// target logits (sum; only the target's owner adds a non-zero); the full logits never
/// travel. Returns the loss (the same on every rank) and,
/// when `grad` is given, writes dL/dlogits_r [N, V/P] into it. Columns at or past
/// `real_vocab` (padding) are left out of the softmax.
double vocab_parallel_cross_entropy(const Tensor& logits_r, const Tensor& labels, ShardRange range,
                                    std::int64_t real_vocab, dist::ProcessGroup& group,
                                    Tensor* grad = nullptr);

}  // namespace mgpu::parallel::tp
