// Private: the CUDA twins of the CPU loops in layernorm.cpp, gelu.cpp and embedding.cpp. Callers have
// checked and allocated every operand; these only launch. Statistics and the gradients of
// weight and bias are in the statistics dtype (f32, or f64 for f64 inputs).
#pragma once

#include <cstdint>
#include <vector>

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

/// ids: [N] i64 on the device, already checked against [0, V); out: [N, C].
void embedding_cuda(const Tensor& ids, const Tensor& weight, Tensor& out, std::int64_t C);
/// ids: the N ids on the host, already checked against [0, V) (the positions are grouped
/// by row there); grad_out: [N, C]; grad_weight: [V, C], added to.
void embedding_backward_cuda(const std::vector<std::int64_t>& ids, const Tensor& grad_out,
                             Tensor& grad_weight, std::int64_t V, std::int64_t C);

}  // namespace mgpu::nn::detail
