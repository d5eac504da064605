/// @file maxpool2d.h
/// @brief MaxPool2d: the largest value of each k x k window (no padding).
#pragma once

#include <cstdint>

#include "mgpu/nn/layer.h"

namespace mgpu::nn {

namespace detail {
/// What MaxPool2d keeps of each forward for its backward.
struct MaxPool2dSaved {
  Tensor argmax;  // i64, per output element: flat index into its input plane
  Shape input_shape;
};
}  // namespace detail

/// x [N, C, H, W] -> [N, C, (H - k) / s + 1, (W - k) / s + 1]. Backward routes each output
/// gradient to the input element that was the maximum (the first one on ties).
class MaxPool2d : public Layer<MaxPool2d, detail::MaxPool2dSaved> {
 public:
  /// stride 0 means stride = kernel_size (PyTorch's default).
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

 private:
  using Saved = detail::MaxPool2dSaved;
  std::int64_t kernel_, stride_;
};

}  // namespace mgpu::nn
