// Private: the running-statistics update shared by SyncBatchNorm's local and synchronised
// paths (the same rule as nn::BatchNorm's).
#pragma once

#include <cstdint>

#include "mgpu/ops.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::detail {

/// t in `dtype` (a no-op when it already is).
inline Tensor as_dtype(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : cast(t, dtype);
}

/// running_mean = (1 - m) * running_mean + m * mean;
/// running_var  = (1 - m) * running_var  + m * var * count / (count - 1)   (unbiased).
/// Undefined running tensors are left alone (track_running_stats = false). count > 1.
inline void update_running_stats(Tensor& running_mean, Tensor& running_var, const Tensor& mean,
                                 const Tensor& biased_var, std::int64_t count, double momentum) {
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  if (running_mean.defined()) {
    scale_(running_mean, 1.0 - momentum);
    axpy_(running_mean, momentum, as_dtype(mean, running_mean.dtype()));
  }
  if (running_var.defined()) {
    scale_(running_var, 1.0 - momentum);
    axpy_(running_var, momentum * unbias, as_dtype(biased_var, running_var.dtype()));
  }
}

}  // namespace mgpu::parallel::detail
