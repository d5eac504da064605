/// @file scaling.h
/// @brief The two kernels behind GradScaler, with PyTorch's arithmetic: the fused
/// check-and-unscale of the gradients and the update rule of the loss scale.
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::amp {

/// The unscaling factor PyTorch uses: 1 / scale computed in double, then rounded to float
/// (a float division could round differently under some compiler options).
float inverse_scale(float scale);

/// torch._amp_foreach_non_finite_check_and_unscale_: for every element g of every tensor
/// in `grads` (floating, all on found_inf's device): if g is inf or NaN, found_inf <- 1;
/// then g <- g * inv_scale (computed in float for f32/f16/bf16, in double for f64; left
/// as it is when inv_scale is 1). Non-finite values are multiplied too (they stay
/// non-finite). found_inf is an f32 {} tensor; it is only ever set to 1, never cleared,
/// so zero it first. One pass over the memory on the CPU and on CUDA.
void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf,
                                   float inv_scale);

/// torch._amp_update_scale_ on host values. With found_inf: scale <- scale * backoff_factor,
/// growth_tracker <- 0. Without: growth_tracker + 1 clean steps in a row; when that reaches
/// growth_interval, scale <- scale * growth_factor (computed in double, rounded to float,
/// and kept only if finite, so the scale never becomes inf) and growth_tracker <- 0;
/// otherwise growth_tracker <- growth_tracker + 1. Lesson 08's task 1 defines it (the
/// library is built with solutions/08_mixed_precision/scale_update.cpp).
void update_scale(float& scale, std::int32_t& growth_tracker, bool found_inf,
                  double growth_factor, double backoff_factor, std::int64_t growth_interval);

}  // namespace mgpu::amp
