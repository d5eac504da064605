/// @file loss.h
/// @brief CrossEntropyLoss: mean softmax cross-entropy over a batch of logits.
#pragma once

#include "mgpu/tensor.h"

namespace mgpu::nn {

/// loss = mean over rows of -log softmax(logits)[label]. Not a Module: it takes labels too
/// and starts the backward pass (its backward needs no incoming gradient).
class CrossEntropyLoss {
 public:
  /// logits [N, C] (floating), labels [N] (i32 or i64). Returns the mean loss, shape {}.
  Tensor forward(const Tensor& logits, const Tensor& labels);
  /// d(loss)/d(logits) of the last forward, times grad_scale (e.g. a loss scale).
  Tensor backward(double grad_scale = 1.0) const;
  /// Softmax probabilities of the last forward ([N, C]).
  const Tensor& probs() const { return probs_; }

 private:
  Tensor probs_, labels_;
};

}  // namespace mgpu::nn
