/// @file attention_core.h
/// @brief The core of a self-attention layer, y = softmax(q kᵀ/√D, causal) v over the heads
/// a rank holds, as a part the layer is given. The tensor-parallel attention
/// (tp::ParallelSelfAttention) computes its projections and hands q, k and v to its core:
/// LocalAttentionCore (lesson 12's attention over the positions the rank holds, all of the
/// sequence) by default, or cp::RingAttentionCore (lesson 14's attention over a sequence
/// split across a context-parallel group). A plan picks the core; the layer is the same.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "mgpu/nn/attention.h"
#include "mgpu/nn/module.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// The attention core of one layer. Each training forward keeps what its backward needs,
/// under the current nn::ContextScope (a pipeline's micro-batches keep one context each).
class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  /// q, k, v [B·H, T, D] (this rank's heads and positions) -> y [B·H, T, D]. With
  /// `training`, keeps q, k, v and what else the backward needs.
  virtual Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, bool training) = 0;
  /// dL/dy of the newest kept forward (of the current ContextScope) -> dL/dq, dL/dk, dL/dv.
  virtual nn::AttentionGrads backward(const Tensor& grad_y) = 0;
  /// A core of the same kind and settings that keeps nothing.
  virtual std::shared_ptr<AttentionCore> clone() const = 0;
  /// Forwards kept without their backward.
  virtual std::size_t saved() const = 0;
  /// Drops every kept forward.
  virtual void clear_saved() = 0;
  /// One line: what it computes over what.
  virtual std::string describe() const = 0;
};

/// Lesson 12's attention core (nn::causal_attention) over the positions this rank holds:
/// keeps q, k, v and the [B·H, T, T] probabilities.
class LocalAttentionCore : public AttentionCore {
 public:
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, bool training) override;
  nn::AttentionGrads backward(const Tensor& grad_y) override;
  std::shared_ptr<AttentionCore> clone() const override;
  std::size_t saved() const override { return saved_.size(); }
  void clear_saved() override { saved_.clear(); }
  std::string describe() const override { return "local attention core"; }

 private:
  struct Saved {
    Tensor q, k, v, probs;
  };
  nn::SavedContexts<Saved> saved_;
};

}  // namespace mgpu::parallel
