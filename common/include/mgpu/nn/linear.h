/// @file linear.h
/// @brief Linear: y = x W^T + b. forward and backward are lesson 01's task 1
/// (lessons/01_single_gpu/linear.cpp), their autocast path lesson 08's task 3
/// (lessons/08_mixed_precision/linear_mixed_precision.cpp); the library compiles both
/// references (solutions/), the rest is linear_layer.cpp's.
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

  /// x [N, in] -> [N, out] (lesson 01); inside an amp::Autocast region whose GEMM dtype is
  /// not the weight's, forward_autocast's 16-bit GEMMs with f32 sums (lesson 08).
  Tensor forward(const Tensor& x) override;
  /// grad_out [N, out] -> grad_in [N, in] (empty when !input_requires_grad());
  /// weight.grad += grad_out^T x, bias.grad += sum_rows (lesson 01); after a
  /// forward_autocast, backward_autocast (lesson 08).
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
  /// forward inside an autocast region whose GEMM dtype `compute` is not the weight's: the
  /// GEMM's operands in `compute` (the weight cast once per region), f32 sums, f32 output;
  /// keeps the 16-bit operands. Lesson 08's task 3.
  Tensor forward_autocast(const Tensor& x, DType compute);
  /// backward of a forward_autocast, whose operands `s` holds: the GEMMs in their dtype with
  /// f32 sums, the gradients added in f32. Lesson 08's task 3.
  Tensor backward_autocast(const Tensor& grad_out, const Saved& s);

  std::int64_t in_, out_;
  bool has_bias_;
  std::size_t weight_ = 0, bias_ = 0;
};

}  // namespace mgpu::nn
