// CUDA twin of dropout_kernels.cpp.
#include "mgpu/rng.h"
#include "nn/kernels_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::nn::detail {

// One thread per element: the random number of element i depends only on (seed, i), so
// this mask equals the CPU loop's bit for bit, however the grid is laid out.
template <typename T>
__global__ void dropout_mask_kernel(T* mask, float threshold, double keep_scale,
                                    std::uint64_t seed, std::int64_t total) {
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const bool drop = random_uniform(seed, static_cast<std::uint64_t>(i)) < threshold;
    mask[i] = from_compute<T>(static_cast<compute_t<T>>(drop ? 0.0 : keep_scale));
  }
}

void dropout_mask_cuda(Tensor& mask, double p, std::uint64_t seed) {
  const double keep_scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  launch_grid_stride("dropout_mask", mask,
                     [](auto tag) { return dropout_mask_kernel<decltype(tag)>; },
                     mask, static_cast<float>(p), keep_scale, seed);
}

}  // namespace mgpu::nn::detail
