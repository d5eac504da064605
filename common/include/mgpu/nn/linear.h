/// @file linear.h
/// @brief Linear: y = x W^T + b (the library's reference; lesson 01 has the learner build it).
#pragma once

#include <cstdint>

#include "mgpu/nn/layer.h"

namespace mgpu::nn {

namespace detail {
/// What Linear keeps of each forward for its backward.
struct LinearSaved {
  Tensor x, w;  // the GEMM's operands as forward used them (16-bit under autocast)
};
}  // namespace detail

/// Fully connected layer, PyTorch's nn.Linear.
class Linear : public Layer<Linear, detail::LinearSaved> {
 public:
  /// weight [out, in] and bias [out], both U(-1/sqrt(in), 1/sqrt(in)) as in PyTorch.
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);

  /// x [N, in] -> [N, out]; inside an amp::Autocast region, 16-bit GEMMs with f32 sums.
  /// forward and backward are lesson 08's task 3 (the library is built with
  /// solutions/08_mixed_precision/linear_mixed_precision.cpp).
  Tensor forward(const Tensor& x) override;
  /// grad_out [N, out] -> grad_in [N, in]; weight.grad += grad_out^T x, bias.grad += sum_rows.
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// W [out, in].
  Parameter& weight() { return parameter_at(weight_); }
  /// b [out]; throws when built without a bias.
  Parameter& bias();
  /// Whether the layer has a bias.
  bool has_bias() const { return has_bias_; }
  /// Input features.
  std::int64_t in_features() const { return in_; }
  /// Output features.
  std::int64_t out_features() const { return out_; }

 private:
  using Saved = detail::LinearSaved;
  std::int64_t in_, out_;
  bool has_bias_;
  std::size_t weight_ = 0, bias_ = 0;
};

}  // namespace mgpu::nn
