// Private: the CUDA twins of the CPU loops in im2col.cpp, pool.cpp, batchnorm_kernels.cpp
// and dropout_kernels.cpp. Callers have checked and allocated every operand; these only
// launch. Per-channel tensors of batch norm are in the accumulation dtype (f32 or f64).
#pragma once

#include <cstdint>

#include "mgpu/nn/functional.h"
#include "mgpu/tensor.h"

namespace mgpu::nn::detail {

void im2col_cuda(const Tensor& x, Tensor& cols, const ConvGeometry& g);
void col2im_cuda(const Tensor& cols, Tensor& x, const ConvGeometry& g);
void transpose_inner_cuda(const Tensor& x, Tensor& y, std::int64_t batch, std::int64_t m,
                          std::int64_t k);

void max_pool2d_cuda(const Tensor& x, Tensor& y, Tensor& argmax, std::int64_t kernel,
                     std::int64_t stride);
void max_pool2d_backward_cuda(const Tensor& grad_out, const Tensor& argmax, Tensor& grad_in,
                              std::int64_t kernel, std::int64_t stride);

/// The [N, C, S] view of a batch-norm input.
struct NCS {
  std::int64_t n = 0, c = 0, s = 0;
};
void bn_stats_cuda(const Tensor& x, NCS d, Tensor& mean, Tensor& var);
void bn_invstd_cuda(const Tensor& var, double eps, Tensor& invstd);
void bn_apply_cuda(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                   const Tensor& weight, const Tensor& bias, Tensor& y, NCS d);
void bn_backward_reduce_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                             Tensor& sum_dy, Tensor& sum_dy_xmu, NCS d);
void bn_backward_apply_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                            const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                            const Tensor& sum_dy_xmu, std::int64_t count, Tensor& grad_in,
                            NCS d);

void dropout_mask_cuda(Tensor& mask, double p, std::uint64_t seed);

}  // namespace mgpu::nn::detail
