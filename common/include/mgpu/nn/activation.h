/// @file activation.h
/// @brief Parameter-free layers: ReLU, GELU and Flatten.
#pragma once

#include "mgpu/nn/module.h"

namespace mgpu::nn {

/// max(x, 0), elementwise. Keeps its input for backward.
class ReLU : public Module {
 public:
  ReLU() = default;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<Module> clone() const override;
  std::string describe() const override { return "ReLU()"; }

 protected:
  /// Copies everything (clone() then drops the saved contexts).
  ReLU(const ReLU&) = default;
  void clear_saved_self() override { saved_.clear(); }
  std::size_t saved_self() const override { return saved_.size(); }

 private:
  SavedContexts<Tensor> saved_;
};

/// GELU in its tanh form, GPT-2's activation (PyTorch: nn.GELU(approximate='tanh')):
///     gelu(x) = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))
Tensor gelu(const Tensor& x);
/// dL/dx of gelu from dL/dy and the forward's input x:
///     dL/dx = dL/dy · (½(1 + t) + ½ x (1 − t²) √(2/π) (1 + 3 · 0.044715 x²)),  t = tanh(...)
Tensor gelu_backward(const Tensor& grad_out, const Tensor& x);

/// gelu(x), elementwise. Keeps its input for backward.
class GELU : public Module {
 public:
  GELU() = default;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<Module> clone() const override;
  std::string describe() const override { return "GELU(approximate='tanh')"; }

 protected:
  /// Copies everything (clone() then drops the saved contexts).
  GELU(const GELU&) = default;
  void clear_saved_self() override { saved_.clear(); }
  std::size_t saved_self() const override { return saved_.size(); }

 private:
  SavedContexts<Tensor> saved_;
};

/// [N, d1, d2, ...] -> [N, d1*d2*...] (a view: no copy). Backward restores the shape.
class Flatten : public Module {
 public:
  Flatten() = default;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<Module> clone() const override;
  std::string describe() const override { return "Flatten()"; }

 protected:
  /// Copies everything (clone() then drops the saved contexts).
  Flatten(const Flatten&) = default;
  void clear_saved_self() override { saved_.clear(); }
  std::size_t saved_self() const override { return saved_.size(); }

 private:
  SavedContexts<Shape> saved_;
};

}  // namespace mgpu::nn
