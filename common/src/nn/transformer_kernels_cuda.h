// Private: the CUDA twins of the CPU loops in layernorm.cpp and gelu.cpp. Callers have
// checked and allocated every operand; these only launch. Statistics and the gradients of
// weight and bias are in the statistics dtype (f32, or f64 for f64 inputs).
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::nn::detail {

/// x, y: [rows, C]; weight, bias: [C] or undefined; mean, rstd: [rows].
void layer_norm_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                     Tensor& y, Tensor& mean, Tensor& rstd, std::int64_t rows, std::int64_t C);
/// grad_in may be undefined (not wanted); grad_weight and grad_bias likewise.
void layer_norm_backward_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& weight, Tensor& grad_in,
                              Tensor& grad_weight, Tensor& grad_bias, std::int64_t rows,
                              std::int64_t C);

void gelu_cuda(const Tensor& x, Tensor& y);
void gelu_backward_cuda(const Tensor& grad_out, const Tensor& x, Tensor& grad_in);

}  // namespace mgpu::nn::detail
