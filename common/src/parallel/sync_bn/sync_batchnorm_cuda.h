// Private: the CUDA twin of the CPU merge in sync_batchnorm_kernels.cpp. The caller has
// checked and allocated every operand; this only launches.
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::parallel::detail {

/// gathered [W, 2C+1] (f32 or f64) -> mean, var (biased), invstd [C], same dtype.
void merge_batch_stats_cuda(const Tensor& gathered, double eps, Tensor& mean, Tensor& var,
                            Tensor& invstd, std::int64_t W, std::int64_t C);

}  // namespace mgpu::parallel::detail
