// Private: the CUDA twin of scaling_kernels.cpp's CPU loop. Only called where MGPU_WITH_CUDA is
// defined; the caller has checked every operand (floating, non-empty, one device).
#pragma once

#include "mgpu/tensor.h"

namespace mgpu::amp::detail {

/// For each element of `grad`: found_inf <- 1 if it is inf or NaN; then grad *= inv_scale.
/// Queued on the device's current stream; does not wait.
void non_finite_check_and_unscale_cuda(Tensor& grad, Tensor& found_inf, float inv_scale);

}  // namespace mgpu::amp::detail
