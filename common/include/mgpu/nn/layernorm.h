/// @file layernorm.h
/// @brief Layer normalization over the last dimension (PyTorch's nn.LayerNorm(C)), the
/// normalization of a transformer block: every row of C values is normalized on its own,
/// so unlike BatchNorm it needs no batch and behaves the same in training and evaluation.
///
///     mean = (1/C) Σ_c x_c      var = (1/C) Σ_c (x_c − mean)²      rstd = 1 / sqrt(var + eps)
///     y_c  = (x_c − mean) · rstd · weight_c + bias_c
#pragma once

#include <cstdint>

#include "mgpu/nn/layer.h"
#include "mgpu/tensor.h"

namespace mgpu::nn {

/// The per-row statistics a forward keeps for its backward: mean and rstd, [rows] in the
/// statistics dtype (f64 for f64 inputs, f32 otherwise).
struct LayerNormStats {
  Tensor mean;  ///< [rows]: each row's mean
  Tensor rstd;  ///< [rows]: 1 / sqrt(var + eps) of each row
};

/// y = layer_norm(x) over the last dimension of x ([..., C], any floating dtype, C >= 1).
/// weight and bias are [C] in x's dtype on x's device, or undefined (no scale / no shift).
/// `stats`, when given, receives the mean and rstd of every row.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  LayerNormStats* stats = nullptr);

/// The gradients of layer_norm, from dL/dy and what the forward kept. With x̂ = (x − mean)·rstd
/// and g = dL/dy · weight (dL/dy itself without a weight), per row:
///     dL/dx = rstd · (g − mean_c(g) − x̂ · mean_c(g · x̂))
///     dL/dweight = Σ_rows dL/dy · x̂        dL/dbias = Σ_rows dL/dy
struct LayerNormGrads {
  Tensor grad_input;   ///< like x; undefined unless asked for
  Tensor grad_weight;  ///< [C] in the statistics dtype; undefined unless asked for
  Tensor grad_bias;    ///< [C] in the statistics dtype; undefined unless asked for
};
/// The gradients above from dL/dy, the forward's x, its statistics and the weight (or an
/// undefined weight); dL/dx only with input_grad, dL/dweight and dL/dbias only with weight_grads.
LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                   const LayerNormStats& stats, const Tensor& weight,
                                   bool input_grad, bool weight_grads);

namespace detail {
/// What LayerNorm keeps of each forward for its backward.
struct LayerNormSaved {
  Tensor x;
  LayerNormStats stats;
};
}  // namespace detail

/// nn.LayerNorm(C, eps=1e-5, elementwise_affine=True, bias=True): parameters "weight"
/// (ones) and "bias" (zeros), [C] each. Input [..., C]. Keeps x and the statistics for
/// backward in training mode.
class LayerNorm : public Layer<LayerNorm, detail::LayerNormSaved> {
 public:
  /// Normalizes the last dimension, of size normalized_size; eps and bias as in PyTorch.
  explicit LayerNorm(std::int64_t normalized_size, double eps = 1e-5, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// C, the size of the last dimension it normalizes.
  std::int64_t normalized_size() const { return size_; }
  /// Added to the variance before the square root.
  double eps() const { return eps_; }
  /// The scale [C] ("weight").
  Parameter& weight() { return parameter_at(weight_); }
  /// Throws when the layer was built without a bias.
  Parameter& bias();

 private:
  using Saved = detail::LayerNormSaved;
  std::int64_t size_;
  double eps_;
  bool has_bias_;
  std::size_t weight_ = 0, bias_ = 0;
};

}  // namespace mgpu::nn
