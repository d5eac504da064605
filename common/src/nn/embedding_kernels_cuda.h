// Private: the CUDA twins of embedding.cpp's CPU loops (embedding_kernels.cu). The caller
// has checked the ids and allocated every operand; these only launch.
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::nn::detail {

/// ids: [N] i64 on the device, already checked against [0, V); out: [N, C].
void embedding_cuda(const Tensor& ids, const Tensor& weight, Tensor& out, std::int64_t C);
/// ids: the N ids on the host, already checked against [0, V) (the positions are grouped
/// by row there); grad_out: [N, C]; grad_weight: [V, C], added to.
void embedding_backward_cuda(const std::vector<std::int64_t>& ids, const Tensor& grad_out,
                             Tensor& grad_weight, std::int64_t V, std::int64_t C);

}  // namespace mgpu::nn::detail
