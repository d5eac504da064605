// The dropout mask on the CPU and the dispatch to dropout_kernels.cu.
#include "dispatch.h"
#include "mgpu/nn/functional.h"
#include "mgpu/rng.h"
#ifdef MGPU_WITH_CUDA
#include "nn/kernels_cuda.h"
#endif

namespace mgpu::nn {

Tensor dropout_mask(const Shape& shape, DType dtype, const Device& device, double p,
                    std::uint64_t seed) {
  MGPU_CHECK(p >= 0.0 && p <= 1.0, "dropout_mask: p = ", p, " is not a probability in [0, 1]");
  Tensor mask = Tensor::empty(shape, dtype, device);
  if (mask.numel() == 0) return mask;
  if (device.is_cuda()) {
    MGPU_IF_CUDA(detail::dropout_mask_cuda(mask, p, seed));
    return mask;
  }
  // p == 1 drops everything; 1/(1-p) would be infinite.
  const double keep_scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  const float threshold = static_cast<float>(p);
  mgpu::detail::dispatch_floating(dtype, "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    T* m = mask.data<T>();
    for (std::int64_t i = 0; i < mask.numel(); ++i) {
      const bool drop = random_uniform(seed, static_cast<std::uint64_t>(i)) < threshold;
      m[i] = mgpu::detail::from_compute<T>(drop ? 0.0 : keep_scale);
    }
  });
  return mask;
}

}  // namespace mgpu::nn
