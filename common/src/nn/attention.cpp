// Causal self-attention: the module that projects to q, k, v, splits the heads, runs the
// attention core (lesson 12 defines it) and projects back.
#include "mgpu/nn/attention.h"

#include <cmath>
#include <sstream>

#include "mgpu/ops.h"

namespace mgpu::nn {
namespace detail {

void check_attention_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_defined(op, q, "q");
  MGPU_CHECK(q.ndim() == 3 && k.shape() == q.shape() && v.shape() == q.shape() &&
                 k.dtype() == q.dtype() && v.dtype() == q.dtype() &&
                 k.device() == q.device() && v.device() == q.device(),
             op, ": q ", q.str(), ", k ", k.str(), " and v ", v.str(),
             " must all be [B·n_head, T, D], of one dtype, on one device");
}

}  // namespace detail

// causal_attention and causal_attention_backward, the attention core, are lesson 12's tasks
// 1 and 2 (solutions/12_transformer/attention_forward.cpp, attention_backward.cpp).

// ---- the heads around the core ---------------------------------------------------------------

HeadsQKV split_heads(const Tensor& qkv, std::int64_t B, std::int64_t T, std::int64_t H,
                     std::int64_t D) {
  // [B·T, 3·H·D] = [B, T, 3, H, D] -> [3, B, H, T, D]: q, k and v each one contiguous block.
  const Tensor split = permute(qkv.reshape({B, T, 3, H, D}), {2, 0, 3, 1, 4});
  const std::int64_t block = B * H * T * D;
  return {split.view(0, {B * H, T, D}), split.view(block, {B * H, T, D}),
          split.view(2 * block, {B * H, T, D})};
}

Tensor merge_heads(const Tensor& y, std::int64_t B, std::int64_t T, std::int64_t H,
                   std::int64_t D) {
  return permute(y.reshape({B, H, T, D}), {0, 2, 1, 3}).reshape({B * T, H * D});
}

Tensor merge_heads_backward(const Tensor& d, std::int64_t B, std::int64_t T, std::int64_t H,
                            std::int64_t D) {
  return permute(d.reshape({B, T, H, D}), {0, 2, 1, 3}).reshape({B * H, T, D});
}

Tensor split_heads_backward(const AttentionGrads& g, std::int64_t B, std::int64_t T,
                            std::int64_t H, std::int64_t D, DType dtype) {
  Tensor d_split = Tensor::empty({3, B, H, T, D}, dtype, g.dq.device());
  const std::int64_t block = B * H * T * D;
  for (int i = 0; i < 3; ++i) {
    Tensor part = d_split.view(i * block, {B * H, T, D});
    cast_(part, i == 0 ? g.dq : i == 1 ? g.dk : g.dv);
  }
  return permute(d_split, {1, 3, 0, 2, 4}).reshape({B * T, 3 * H * D});
}

// ---- the module ------------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(std::int64_t n_embd, std::int64_t n_head)
    : embd_(n_embd), heads_(n_head) {
  MGPU_CHECK(n_embd > 0 && n_head > 0 && n_embd % n_head == 0, "CausalSelfAttention(n_embd=",
             n_embd, ", n_head=", n_head, "): n_embd must be a positive multiple of n_head");
  register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd));
  register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd));
}

std::string CausalSelfAttention::describe() const {
  std::ostringstream os;
  os << "CausalSelfAttention(n_embd=" << embd_ << ", n_head=" << heads_ << ")";
  return os.str();
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  check_defined("CausalSelfAttention", x, "input");
  MGPU_CHECK(x.ndim() == 3 && x.size(2) == embd_, describe(), ": input is ", x.str(),
             ", expected [B, T, ", embd_, "]");
  const std::int64_t B = x.size(0), T = x.size(1), H = heads_, D = embd_ / heads_;
  // Step 1) q, k, v side by side, [B·T, 3C] = [B, T, 3, H, D]; the heads move next to the
  // batch: [3, B, H, T, D], so q, k and v are each a contiguous [B·H, T, D] block.
  const Tensor qkv = child_at(0)->forward(x.reshape({B * T, embd_}));
  const auto [q, k, v] = split_heads(qkv, B, T, H, D);
  // Step 2) every head attends over its own D values.
  Tensor probs;
  const Tensor y = causal_attention(q, k, v, is_training() && keep_probs_ ? &probs : nullptr);
  // Step 3) the heads side by side again, [B, T, H, D] = [B·T, C], and the output projection.
  const Tensor merged = merge_heads(y, B, T, H, D);
  if (is_training()) saved_.push(describe(), Saved{q, k, v, probs, B, T});
  return child_at(1)->forward(merged).reshape({B, T, embd_});
}

Tensor CausalSelfAttention::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  const std::int64_t B = s.batch, T = s.time, H = heads_, D = embd_ / heads_;
  MGPU_CHECK(grad_out.shape() == Shape({B, T, embd_}), describe(), ": grad_out is ",
             grad_out.str(), " but the forward's output was ", shape_str({B, T, embd_}));
  // The forward's steps in reverse: projection, heads apart, attention, heads together.
  const Tensor d_merged = child_at(1)->backward(grad_out.reshape({B * T, embd_}));
  const Tensor dy = merge_heads_backward(d_merged, B, T, H, D);
  // A context saved without its probabilities (RecomputePolicy::attn) computes them again.
  const AttentionGrads g = s.probs.defined() ? causal_attention_backward(dy, s.q, s.k, s.v, s.probs)
                                             : backward_selective(dy, s);
  const Tensor d_qkv = split_heads_backward(g, B, T, H, D, grad_out.dtype());
  const Tensor dx = child_at(0)->backward(d_qkv);
  return dx.defined() ? dx.reshape({B, T, embd_}) : dx;
}

}  // namespace mgpu::nn
