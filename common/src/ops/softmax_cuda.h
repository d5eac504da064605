// Private: the CUDA half of softmax.cpp. rows × n values, row-major; causal rows are
// [T, T] blocks (row r is query r % T).
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::detail {

void softmax_cuda(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t n, bool causal);
void softmax_backward_cuda(const Tensor& grad_out, const Tensor& y, Tensor& grad_in,
                           std::int64_t rows, std::int64_t n);

}  // namespace mgpu::detail
