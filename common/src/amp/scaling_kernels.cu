// CUDA twin of scaling_kernels.cpp's check_and_unscale_cpu: one pass that both finds non-finite
// gradients and unscales them, so the gradients are read from memory once, not twice.
#include "amp/amp_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::amp::detail {

template <typename T>
__global__ void non_finite_check_and_unscale_kernel(T* grad, float* found_inf, float inv_scale,
                                                    std::int64_t n) {
  // compute_t: float for f32/f16/bf16, double for f64 (the CPU loop's arithmetic type).
  const compute_t<T> inv = static_cast<compute_t<T>>(inv_scale);
  // Grid-stride loop: consecutive threads read consecutive elements (coalesced).
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const compute_t<T> v = to_compute(grad[i]);
    // Many threads may find an inf at once; they all write the same 1.0, so the race is
    // harmless and no atomic is needed. found_inf is never cleared here.
    if (!isfinite(v)) *found_inf = 1.f;
    if (inv_scale != 1.f) grad[i] = from_compute<T>(v * inv);
  }
}

void non_finite_check_and_unscale_cuda(Tensor& grad, Tensor& found_inf, float inv_scale) {
  // found_inf is f32 whatever grad's dtype, so it goes as a float pointer, not a Tensor.
  launch_grid_stride("non_finite_check_and_unscale_", grad,
                     [](auto tag) { return non_finite_check_and_unscale_kernel<decltype(tag)>; },
                     grad, device_ptr<float>(found_inf), inv_scale);
}

}  // namespace mgpu::amp::detail
