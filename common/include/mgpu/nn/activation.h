/// @file activation.h
/// @brief Parameter-free layers: ReLU, GELU and Flatten.
#pragma once

#include "mgpu/nn/layer.h"

namespace mgpu::nn {

/// max(x, 0), elementwise. Keeps its input for backward.
class ReLU : public Layer<ReLU, Tensor> {
 public:
  ReLU() = default;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override { return "ReLU()"; }
};

/// GELU in its tanh form, GPT-2's activation (PyTorch: nn.GELU(approximate='tanh')):
///     gelu(x) = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))
Tensor gelu(const Tensor& x);
/// dL/dx of gelu from dL/dy and the forward's input x:
///     dL/dx = dL/dy · (½(1 + t) + ½ x (1 − t²) √(2/π) (1 + 3 · 0.044715 x²)),  t = tanh(...)
Tensor gelu_backward(const Tensor& grad_out, const Tensor& x);

/// gelu(x), elementwise. Keeps its input for backward.
class GELU : public Layer<GELU, Tensor> {
 public:
  GELU() = default;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override { return "GELU(approximate='tanh')"; }
};

/// [N, d1, d2, ...] -> [N, d1*d2*...] (a view: no copy). Backward restores the shape.
class Flatten : public Layer<Flatten, Shape> {
 public:
  Flatten() = default;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override { return "Flatten()"; }
};

}  // namespace mgpu::nn
