// A GPT block split over a tensor-parallel group: attention by heads, the MLP by hidden
// features, the LayerNorms replicated (or, under sequence parallelism, cut along T). The
// sub-blocks compute partial sums and never communicate; the block sums them, once per
// sub-block in each direction.
#include "mgpu/parallel/tp/parallel_block.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/nn/activation.h"
#include "mgpu/nn/attention.h"
#include "mgpu/nn/layernorm.h"
#include "mgpu/ops.h"

namespace mgpu::parallel::tp {
namespace {

nn::Linear& linear_child(nn::Module& m, std::size_t i) {
  return static_cast<nn::Linear&>(*m.children().at(i).second);
}

// The rows of `full` (c_attn) that belong to heads `heads` of head size D (lesson 13's
// qkv_head_rows), as a Linear of their own.
std::shared_ptr<nn::Linear> head_rows(nn::Linear& full, ShardRange heads, std::int64_t D) {
  const std::int64_t C = full.in_features();
  auto local = std::make_shared<nn::Linear>(C, 3 * heads.size() * D, full.has_bias());
  local->to(full.dtype());
  local->to(full.device());
  copy_(local->weight().value, qkv_head_rows(full.weight().value, heads, D));
  if (full.has_bias()) copy_(local->bias().value, qkv_head_rows(full.bias().value, heads, D));
  return local;
}

// SP's re-gather (Megatron-LM's): the column product y = x W^T + b of `lin` on the whole
// sequence, x = gather_sequence(x_r), which the caller does not keep (it keeps x_r).
// [B, T/P, C] -> [B·T, out].
Tensor regathered_forward(nn::Linear& lin, const Tensor& x_r, dist::ProcessGroup& group) {
  const Tensor x = gather_sequence(x_r, group);
  Tensor y = matmul(x.reshape({x.numel() / x.size(2), x.size(2)}), lin.weight().value, false, true);
  if (lin.has_bias()) add_rowwise_(y, lin.bias().value);
  return y;
}

// Its backward: x_r all-gathered again for the weight's gradient. dy [B·T, out] ->
// d(gathered input) [B·T, C]; adds the weight's and bias's gradients and fires their hooks.
Tensor regathered_backward(nn::Linear& lin, const Tensor& x_r, const Tensor& dy,
                           dist::ProcessGroup& group) {
  const Tensor x = gather_sequence(x_r, group);
  add_(lin.weight().grad, matmul(dy, x.reshape({x.numel() / x.size(2), x.size(2)}), true, false));
  lin.weight().notify_grad_ready();
  if (lin.has_bias()) {
    add_(lin.bias().grad, sum(dy, 0));
    lin.bias().notify_grad_ready();
  }
  return matmul(dy, lin.weight().value);
}

void check_sequence(const char* op, const Tensor& x, int parts) {
  MGPU_CHECK(x.ndim() == 3, op, ": expected [B, T, C], got ", x.str());
  MGPU_CHECK(x.size(1) % parts == 0, op, ": T = ", x.size(1), " is not a multiple of the ",
             parts, " ranks of the group (sequence parallelism cuts T evenly)");
}

}  // namespace

// ---- RowShardLinear ----------------------------------------------------------------------------

RowShardLinear::RowShardLinear(nn::Linear& full, ShardRange input_range)
    : in_(input_range.size()), out_(full.out_features()) {
  MGPU_CHECK(full.has_bias(), "RowShardLinear: the full layer has no bias");
  register_parameter("weight", take_columns(full.weight().value, input_range));
  register_parameter("bias", full.bias().value.clone());
}

std::string RowShardLinear::describe() const {
  std::ostringstream os;
  os << "RowShardLinear(in_r=" << in_ << ", out=" << out_ << "; partial sum, bias after)";
  return os.str();
}

Tensor RowShardLinear::forward(const Tensor& x) {
  MGPU_CHECK(x.ndim() == 2 && x.size(1) == in_, describe(), ": input ", x.str());
  if (is_training()) saved_.push(describe(), x);
  return matmul(x, weight().value, false, true);
}

Tensor RowShardLinear::backward(const Tensor& grad_out) {
  const Tensor x = saved_.pop(describe());
  add_(weight().grad, matmul(grad_out, x, true, false));
  weight().notify_grad_ready();  // final for this backward (DDP's hooks, lesson 05)
  return matmul(grad_out, weight().value);
}

// ---- ParallelSelfAttention ---------------------------------------------------------------------

ParallelSelfAttention::ParallelSelfAttention(nn::CausalSelfAttention& full, dist::ProcessGroup& group)
    : core_(std::make_shared<LocalAttentionCore>()) {
  const int P = group.size();
  nn::Linear& c_attn = linear_child(full, 0);
  nn::Linear& c_proj = linear_child(full, 1);
  embd_ = c_attn.in_features();
  const std::int64_t H = full.n_head();
  heads_range_ = head_shard(H, P, group.rank());  // throws unless P divides H
  head_dim_ = embd_ / H;
  heads_ = heads_range_.size();
  register_module("c_attn", head_rows(c_attn, heads_range_, head_dim_));
  register_module("c_proj", std::make_shared<RowShardLinear>(
                                c_proj, ShardRange{heads_range_.begin * head_dim_,
                                                   heads_range_.end * head_dim_}));
}

std::string ParallelSelfAttention::describe() const {
  std::ostringstream os;
  os << "ParallelSelfAttention(n_embd=" << embd_ << ", heads [" << heads_range_.begin << ", "
     << heads_range_.end << "))";
  return os.str();
}

void ParallelSelfAttention::set_core(std::shared_ptr<AttentionCore> core) {
  MGPU_CHECK(core != nullptr, describe(), ": set_core(nullptr)");
  MGPU_CHECK(saved_forwards() == 0, describe(), ": set_core between a forward and its backward");
  core_ = std::move(core);
}

Tensor ParallelSelfAttention::forward(const Tensor& x) {
  MGPU_CHECK(x.ndim() == 3 && x.size(2) == embd_, describe(), ": input ", x.str());
  const std::int64_t B = x.size(0), T = regather_ ? x.size(1) * regather_->size() : x.size(1);
  const std::int64_t H = heads_, D = head_dim_;
  const Tensor qkv = regather_ ? regathered_forward(linear_child(*this, 0), x, *regather_)
                               : child_at(0)->forward(x.reshape({B * T, embd_}));
  const auto [q, k, v] = nn::split_heads(qkv, B, T, H, D);
  const Tensor merged = nn::merge_heads(core_->forward(q, k, v, is_training()), B, T, H, D);
  if (is_training()) saved_.push(describe(), Saved{regather_ ? x : Tensor(), B, T});
  return child_at(1)->forward(merged).reshape({B, T, embd_});
}

Tensor ParallelSelfAttention::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  const std::int64_t B = s.batch, T = s.time, H = heads_, D = head_dim_;
  const Tensor d_merged = child_at(1)->backward(grad_out.reshape({B * T, embd_}));
  const nn::AttentionGrads g = core_->backward(nn::merge_heads_backward(d_merged, B, T, H, D));
  const Tensor d_qkv = nn::split_heads_backward(g, B, T, H, D, grad_out.dtype());
  const Tensor dx = s.x_r.defined() ? regathered_backward(linear_child(*this, 0), s.x_r, d_qkv, *regather_)
                                    : child_at(0)->backward(d_qkv);
  return dx.reshape({B, T, embd_});
}

std::shared_ptr<nn::Module> ParallelSelfAttention::clone() const {
  auto copy = std::shared_ptr<ParallelSelfAttention>(new ParallelSelfAttention(*this));
  copy->core_ = core_->clone();
  copy->clear_saved();
  return copy;
}

// ---- ParallelMLP -------------------------------------------------------------------------------

ParallelMLP::ParallelMLP(nn::MLP& full, dist::ProcessGroup& group) {
  nn::Linear& c_fc = linear_child(full, 0);
  nn::Linear& c_proj = linear_child(full, 2);
  embd_ = c_fc.in_features();
  const ShardRange hidden = shard_range(c_fc.out_features(), group.size(), group.rank());
  auto fc = std::make_shared<nn::Linear>(embd_, hidden.size(), true);
  fc->to(c_fc.dtype());
  fc->to(c_fc.device());
  copy_(fc->weight().value, take_rows(c_fc.weight().value, hidden));
  copy_(fc->bias().value, c_fc.bias().value.slice(hidden.begin, hidden.end));
  register_module("c_fc", fc);
  register_module("gelu", std::make_shared<nn::GELU>());
  register_module("c_proj", std::make_shared<RowShardLinear>(c_proj, hidden));
}

std::string ParallelMLP::describe() const { return "ParallelMLP(n_embd=" + std::to_string(embd_) + ")"; }

Tensor ParallelMLP::forward(const Tensor& x) {
  MGPU_CHECK(x.ndim() == 3 && x.size(2) == embd_, describe(), ": input ", x.str());
  if (regather_) {  // x is this rank's tokens: gathered for c_fc, only they are kept
    Tensor h = regathered_forward(linear_child(*this, 0), x, *regather_);
    if (is_training()) saved_.push(describe(), x);
    for (std::size_t i = 1; i < 3; ++i) h = child_at(i)->forward(h);
    return h.reshape({x.size(0), x.size(1) * regather_->size(), embd_});
  }
  Tensor h = x.reshape({x.size(0) * x.size(1), embd_});
  for (std::size_t i = 0; i < 3; ++i) h = child_at(i)->forward(h);
  return h.reshape(x.shape());
}

Tensor ParallelMLP::backward(const Tensor& grad_out) {
  Tensor g = grad_out.reshape({grad_out.numel() / embd_, embd_});
  for (std::size_t i = 3; i-- > 1;) g = child_at(i)->backward(g);
  g = regather_ ? regathered_backward(linear_child(*this, 0), saved_.pop(describe()), g, *regather_)
                : child_at(0)->backward(g);
  return g.reshape(grad_out.shape());
}

// ---- the sequence's cut and its collectives ----------------------------------------------------

Tensor scatter_sequence(const Tensor& x, dist::ProcessGroup& group) {
  check_sequence("scatter_sequence", x, group.size());
  const std::int64_t Tr = x.size(1) / group.size();
  return permute(x.reshape({x.size(0), group.size(), Tr, x.size(2)}), {1, 0, 2, 3})
      .view(group.rank() * x.size(0) * Tr * x.size(2), {x.size(0), Tr, x.size(2)})
      .clone();
}

// gather_sequence and reduce_scatter_sequence are lesson 13's task 3
// (solutions/13_tp_sp/sequence_parallel.cpp).

// ---- ParallelBlock -----------------------------------------------------------------------------

ParallelBlock::ParallelBlock(nn::Block& full, dist::ProcessGroup& group, bool sequence_parallel)
    : group_(&group), sp_(sequence_parallel) {
  const auto& kids = full.children();
  register_module("ln_1", kids.at(0).second->clone());
  register_module("attn", std::make_shared<ParallelSelfAttention>(
                              static_cast<nn::CausalSelfAttention&>(*kids.at(1).second), group));
  register_module("ln_2", kids.at(2).second->clone());
  if (auto* dense = dynamic_cast<nn::MLP*>(kids.at(3).second.get())) {
    register_module("mlp", std::make_shared<ParallelMLP>(*dense, group));
    return;
  }
  // Another MLP (an MoE): whole on every rank, on the whole (replicated) input.
  MGPU_CHECK(!sequence_parallel, "ParallelBlock: its mlp (", kids.at(3).second->describe(),
             ") runs whole on every TP rank; sequence parallelism would give it a part of "
             "the tokens: use TP without SP");
  register_module("mlp", kids.at(3).second->clone());
  whole_mlp_ = true;
}

std::string ParallelBlock::describe() const {
  std::ostringstream os;
  os << "ParallelBlock(ranks=" << group_->size() << (sp_ ? ", sequence parallel" : "") << ")";
  return os.str();
}

Tensor ParallelBlock::branch_forward(std::size_t i, RowShardLinear& proj, const Tensor& x) {
  const Tensor normed = child_at(i)->forward(x);
  // f, or the all-gather (under the re-gather the sub-block gathers this rank's tokens itself)
  const Tensor in = sp_ && !regather_ ? gather_sequence(normed, *group_) : normed;
  Tensor partial = child_at(i + 1)->forward(in);
  Tensor out;
  if (sp_) {
    out = reduce_scatter_sequence(partial, *group_);
  } else {
    if (group_->size() > 1) group_->all_reduce(partial, dist::ReduceOp::sum).wait();  // g
    out = partial;
  }
  Tensor rows = out.reshape({out.numel() / out.size(2), out.size(2)});
  add_rowwise_(rows, proj.bias().value);
  return add(x, out);
}

Tensor ParallelBlock::branch_backward(std::size_t i, RowShardLinear& proj, const Tensor& grad_out) {
  const Tensor rows = grad_out.reshape({grad_out.numel() / grad_out.size(2), grad_out.size(2)});
  add_(proj.bias().grad, sum(rows, 0));
  proj.bias().notify_grad_ready();  // this rank's share, final (summed over TP by task 4 under SP)
  const Tensor d_out = sp_ ? gather_sequence(grad_out, *group_) : grad_out;  // g's backward
  Tensor d_in = child_at(i + 1)->backward(d_out);
  Tensor d_normed;
  if (sp_) {
    d_normed = reduce_scatter_sequence(d_in, *group_);
  } else {
    if (group_->size() > 1) group_->all_reduce(d_in, dist::ReduceOp::sum).wait();  // f's backward
    d_normed = d_in;
  }
  Tensor dx = grad_out.clone();
  add_(dx, child_at(i)->backward(d_normed));
  return dx;
}

Tensor ParallelBlock::forward(const Tensor& x) {
  MGPU_CHECK(x.ndim() == 3, describe(), ": expected [B, T, C], got ", x.str());
  auto& attn = static_cast<ParallelSelfAttention&>(*child_at(1));
  const Tensor h = branch_forward(0, attn.c_proj(), x);
  if (whole_mlp_) return add(h, child_at(3)->forward(child_at(2)->forward(h)));
  return branch_forward(2, static_cast<ParallelMLP&>(*child_at(3)).c_proj(), h);
}

Tensor ParallelBlock::backward(const Tensor& grad_out) {
  auto& attn = static_cast<ParallelSelfAttention&>(*child_at(1));
  Tensor dh;
  if (whole_mlp_) {  // the residual's two ways, as nn::Block's; no communication
    dh = grad_out.clone();
    add_(dh, child_at(2)->backward(child_at(3)->backward(grad_out)));
  } else {
    dh = branch_backward(2, static_cast<ParallelMLP&>(*child_at(3)).c_proj(), grad_out);
  }
  return branch_backward(0, attn.c_proj(), dh);
}

void ParallelBlock::set_regather_in_backward(bool on) {
  MGPU_CHECK(!on || sp_, describe(), ": re-gathering in the backward needs sequence parallelism");
  regather_ = on;
  static_cast<ParallelSelfAttention&>(*child_at(1)).set_regather(on ? group_ : nullptr);
  static_cast<ParallelMLP&>(*child_at(3)).set_regather(on ? group_ : nullptr);
}

void ParallelBlock::set_attention_core(std::shared_ptr<AttentionCore> core) {
  MGPU_CHECK(!sp_ || dynamic_cast<LocalAttentionCore*>(core.get()) != nullptr, describe(),
             ": sequence parallelism gathers the whole sequence for attention; a core over a "
             "context-parallel group does not combine with it");
  static_cast<ParallelSelfAttention&>(*child_at(1)).set_core(std::move(core));
}

AttentionCore& ParallelBlock::attention_core() const {
  return static_cast<ParallelSelfAttention&>(*children().at(1).second).core();
}

std::vector<std::string> ParallelBlock::replicated_parameter_names() {
  std::vector<std::string> out;
  for (const auto& [name, p] : named_parameters()) {
    (void)p;
    const bool ln = name.rfind("ln_", 0) == 0;
    const bool row_bias = name == "attn.c_proj.bias" || name == "mlp.c_proj.bias";
    if (ln || row_bias) out.push_back(name);
  }
  return out;
}

// all_reduce_replicated_grads (task 4, replicated_grads.cpp), padded_vocab and
// vocab_parallel_cross_entropy (task 2, vocab_cross_entropy.cpp) are lesson 13's.

}  // namespace mgpu::parallel::tp
