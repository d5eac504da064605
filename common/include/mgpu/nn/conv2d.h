/// @file conv2d.h
/// @brief Conv2d as im2col + one matrix product (square kernel, stride, zero padding).
#pragma once

#include <cstdint>

#include "mgpu/nn/functional.h"
#include "mgpu/nn/layer.h"

namespace mgpu::nn {

namespace detail {
/// What Conv2d keeps of each forward for its backward.
struct Conv2dSaved {
  Tensor cols;  // x unrolled, 16-bit under autocast: [N*H_out*W_out, C_in*k*k] on the GPU,
                // [N, C_in*k*k, H_out*W_out] on the CPU (im2col_image.h)
  Tensor w;     // the weight as the GEMM used it: [C_out, C_in*k*k]
  ConvGeometry geometry;
};
}  // namespace detail

/// x [N, C_in, H, W] -> y [N, C_out, H_out, W_out] with H_out = (H + 2p - k) / s + 1.
///
/// Forward unrolls every k*k patch of x (im2col), so the convolution becomes matrix products
/// with the weight [C_out, C_in*k*k]. On the CPU, per image: the patches as columns
/// [C_in*k*k, H_out*W_out], and one product whose [C_out, H_out*W_out] result is that
/// image's output in NCHW. On the GPU, for the whole batch: the patches as rows
/// [N*H_out*W_out, C_in*k*k], one product, then a transpose to NCHW. Backward runs the same
/// products transposed and folds the patch gradients back onto the image (col2im).
class Conv2d : public Layer<Conv2d, detail::Conv2dSaved> {
 public:
  /// Weight [C_out, C_in, k, k] and bias [C_out] from U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
  /// fan_in = C_in*k*k, as in PyTorch.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         std::int64_t stride = 1, std::int64_t padding = 0, bool bias = true);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// The filters [C_out, C_in, k, k].
  Parameter& weight() { return parameter_at(weight_); }
  /// b [C_out]; throws when built without a bias.
  Parameter& bias();
  /// Whether the layer has a bias.
  bool has_bias() const { return has_bias_; }

 private:
  using Saved = detail::Conv2dSaved;
  Tensor backward_batched(const Saved& s, const Tensor& grad_out);
  Tensor backward_per_image(const Saved& s, const Tensor& grad_out);

  std::int64_t in_ch_, out_ch_, kernel_, stride_, padding_;
  bool has_bias_;
  std::size_t weight_ = 0, bias_ = 0;
};

}  // namespace mgpu::nn
