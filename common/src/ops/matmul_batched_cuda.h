// Private: the CUDA half of matmul_batched (matmul_batched.cu). The caller has checked the
// shapes; m, n, k are those of one product, `batch` the number of products.
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::detail {

void gemm_batched_cuda(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                       std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k,
                       double alpha, double beta);

}  // namespace mgpu::detail
