/// @file attention.h
/// @brief Causal multi-head self-attention, as in GPT-2 (nanoGPT's CausalSelfAttention).
///
/// For n_head heads of size D = C / n_head, with q, k, v each [B·n_head, T, D]:
///
///     scores = q kᵀ / √D            [B·n_head, T, T]
///     probs  = softmax(scores)      row t sees keys 0..t only (the causal mask)
///     y      = probs v              [B·n_head, T, D]
#pragma once

#include <cstdint>

#include "mgpu/nn/layer.h"
#include "mgpu/nn/linear.h"
#include "mgpu/tensor.h"

namespace mgpu::nn {

/// y = softmax(q kᵀ / √D, causal) v for q, k, v [BH, T, D] (one dtype and device); `probs`,
/// when given, receives the [BH, T, T] probabilities the backward needs. Defined by lesson 12
/// (task 1, attention_forward.cpp); the library compiles the reference.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor* probs = nullptr);

/// The gradients of causal_attention with respect to q, k and v.
struct AttentionGrads {
  Tensor dq;  ///< [BH, T, D]
  Tensor dk;  ///< [BH, T, D]
  Tensor dv;  ///< [BH, T, D]
};
/// The gradients of causal_attention from dL/dy and what the forward kept (its q, k, v and
/// probabilities). Defined by lesson 12 (task 2, attention_backward.cpp); the library
/// compiles the reference.
AttentionGrads causal_attention_backward(const Tensor& grad_y, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& probs);

/// q, k and v of H heads of D values, each a contiguous [B·H, T, D].
struct HeadsQKV {
  Tensor q;  ///< [B·H, T, D]
  Tensor k;  ///< [B·H, T, D]
  Tensor v;  ///< [B·H, T, D]
};
/// The heads moved next to the batch: qkv [B·T, 3·H·D] (q, k and v side by side, nanoGPT's
/// c_attn layout) -> q, k, v. Every module that runs the attention core over its heads
/// (CausalSelfAttention, the tensor-parallel one) uses it and the three below.
HeadsQKV split_heads(const Tensor& qkv, std::int64_t B, std::int64_t T, std::int64_t H,
                     std::int64_t D);
/// The heads side by side again: y [B·H, T, D] -> [B·T, H·D].
Tensor merge_heads(const Tensor& y, std::int64_t B, std::int64_t T, std::int64_t H,
                   std::int64_t D);
/// merge_heads' backward: d [B·T, H·D] -> [B·H, T, D].
Tensor merge_heads_backward(const Tensor& d, std::int64_t B, std::int64_t T, std::int64_t H,
                            std::int64_t D);
/// split_heads' backward: the gradients of q, k and v -> [B·T, 3·H·D] in `dtype`.
Tensor split_heads_backward(const AttentionGrads& g, std::int64_t B, std::int64_t T,
                            std::int64_t H, std::int64_t D, DType dtype);

namespace detail {
/// Throws, naming `op`, unless q, k and v are all [BH, T, D] of one dtype on one device.
void check_attention_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v);
}  // namespace detail

namespace detail {
/// What CausalSelfAttention keeps of each forward for its backward.
struct CausalSelfAttentionSaved {
  Tensor q, k, v, probs;
  std::int64_t batch = 0, time = 0;
};
}  // namespace detail

/// Children "c_attn" = Linear(C, 3C) (q, k and v side by side, nanoGPT's layout) and
/// "c_proj" = Linear(C, C). Input and output [B, T, C]; C must be a multiple of n_head.
/// In training mode keeps q, k, v and the probabilities: 3·B·T·C + B·n_head·T² values;
/// without the probabilities (set_keep_probs(false), RecomputePolicy::attn) 3·B·T·C, the
/// backward computing them again.
class CausalSelfAttention : public Layer<CausalSelfAttention, detail::CausalSelfAttentionSaved> {
 public:
  /// n_embd = C, split into n_head heads of C / n_head values each.
  CausalSelfAttention(std::int64_t n_embd, std::int64_t n_head);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// The number of heads.
  std::int64_t n_head() const { return heads_; }
  /// Whether a training forward keeps the [B·n_head, T, T] probabilities (true, the
  /// default) or only q, k and v, the backward recomputing the probabilities (false:
  /// selective recomputation, RecomputePolicy::attn). The results are the same bits.
  void set_keep_probs(bool on) { keep_probs_ = on; }
  /// See set_keep_probs().
  bool keeps_probs() const { return keep_probs_; }

 private:
  using Saved = detail::CausalSelfAttentionSaved;
  // Lesson 12, task 3 (activation_recompute.cpp): the attention core's gradients from a
  // context saved without its probabilities: they are computed again first.
  AttentionGrads backward_selective(const Tensor& grad_y, const Saved& s);
  std::int64_t embd_, heads_;
  bool keep_probs_ = true;
};

}  // namespace mgpu::nn
