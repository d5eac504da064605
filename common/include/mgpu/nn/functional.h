/// @file functional.h
/// @brief The kernels behind the layers, as plain functions (CPU and CUDA).
///
/// Layers (conv2d.h, maxpool2d.h, batchnorm.h, dropout.h) are thin wrappers around these.
/// They are public because later lessons reuse them: SyncBatchNorm (lesson 06) combines
/// batch_norm_stats across ranks and calls batch_norm_apply / batch_norm_backward_* with
/// the global statistics, exactly as PyTorch's SyncBatchNorm does with its kernels.
/// All accept f32, f64, f16 and bf16 (16-bit types compute in f32).
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::nn {

// ---- convolution helpers ---------------------------------------------------------------
/// The sizes of one convolution (square kernel, zero padding).
struct ConvGeometry {
  std::int64_t batch = 0;     ///< N
  std::int64_t channels = 0;  ///< C (input channels)
  std::int64_t height = 0;    ///< H
  std::int64_t width = 0;     ///< W
  std::int64_t kernel = 1;    ///< k (the kernel is k x k)
  std::int64_t stride = 1;    ///< step between patches
  std::int64_t padding = 0;   ///< zeros added on every side
  /// H_out = (H + 2p - k) / s + 1.
  constexpr std::int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  /// W_out = (W + 2p - k) / s + 1.
  constexpr std::int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
  // constexpr: CUDA kernels call these too (the build passes --expt-relaxed-constexpr).
  /// Rows of the unrolled matrix: one per output position of every image.
  constexpr std::int64_t rows() const { return batch * out_height() * out_width(); }
  /// Columns: one per (channel, kernel row, kernel column) of a patch.
  constexpr std::int64_t cols() const { return channels * kernel * kernel; }
};

/// x [N, C, H, W] -> [N*H_out*W_out, C*k*k]: row (n, oh, ow) holds the patch under output
/// position (oh, ow) of image n, zeros where the patch hangs over the padding.
Tensor im2col(const Tensor& x, const ConvGeometry& g);
/// The adjoint of im2col: [N*H_out*W_out, C*k*k] -> [N, C, H, W], summing the entries of
/// overlapping patches (the gradient of im2col).
Tensor col2im(const Tensor& cols, const ConvGeometry& g);
/// [B, M, K] -> [B, K, M]: swaps the two inner dimensions (NHWC <-> NCHW with M = H*W).
Tensor transpose_inner(const Tensor& x);

// ---- max pooling -----------------------------------------------------------------------
/// x [N, C, H, W] -> [N, C, H_out, W_out]; *argmax (i64, same shape as the output) gets the
/// flat index h*W + w of each window's maximum in its input plane (first one on ties).
Tensor max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, Tensor* argmax);
/// grad_in [input_shape]: each input element gets the sum of grad_out over the windows
/// (of this kernel and stride) whose argmax is that element, zero if none.
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& argmax, const Shape& input_shape,
                           std::int64_t kernel, std::int64_t stride);

// ---- batch normalisation ---------------------------------------------------------------
// x is viewed as [N, C, S]: S = 1 for [N, C], H*W for [N, C, H, W]. Per-channel tensors
// ([C]) are f32 for f32/f16/bf16 inputs and f64 for f64 inputs.

/// Per-channel statistics of a batch over its N*S values.
struct BatchNormStats {
  Tensor mean;     ///< [C]
  Tensor var;      ///< [C], biased (divided by the count): what normalises the batch
  std::int64_t count = 0;  ///< N*S values per channel
};
/// Mean and biased variance per channel (two passes: the mean first, then squared
/// deviations, which stays accurate when the mean is large compared to the spread).
BatchNormStats batch_norm_stats(const Tensor& x);
/// 1 / sqrt(var + eps), per channel.
Tensor batch_norm_invstd(const Tensor& var, double eps);
/// y = (x - mean) * invstd * weight + bias; weight and bias may be undefined (no affine).
Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& weight, const Tensor& bias);
/// Per-channel sums the backward needs: sum_dy = sum(dy), sum_dy_xmu = sum(dy * (x - mean)).
/// d(weight) = sum_dy_xmu * invstd, d(bias) = sum_dy. The sums are written into sum_dy and
/// sum_dy_xmu when they are defined: [C] tensors (views into one buffer too) in
/// the statistics dtype (f32, f64 for f64 input) on x's device; undefined ones are
/// allocated. Throws mgpu::Error for a defined output of another shape, dtype or device.
void batch_norm_backward_reduce(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                const Tensor& invstd, Tensor& sum_dy, Tensor& sum_dy_xmu);
/// dx = weight * invstd * (dy - sum_dy / count - (x - mean) * invstd^2 * sum_dy_xmu / count):
/// the gradient through batch statistics computed over `count` values per channel.
Tensor batch_norm_backward_apply(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight,
                                 const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                                 std::int64_t count);

// ---- dropout ----------------------------------------------------------------------------
/// A mask of `shape`: element i is 0 where random_uniform(seed, i) < p, else 1 / (1 - p).
/// Counter-based, so the CPU and every GPU draw the same mask for the same seed.
Tensor dropout_mask(const Shape& shape, DType dtype, const Device& device, double p,
                    std::uint64_t seed);

}  // namespace mgpu::nn
