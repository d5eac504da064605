// permute on CUDA: one thread per output element (consecutive threads write consecutive
// elements: coalesced stores; the loads gather from the input's strides).
#include "cuda_util.cuh"
#include "ops/permute_cuda.h"

namespace mgpu::detail {
namespace {

template <typename T>
__global__ void permute_kernel(const T* x, T* y, PermuteGeometry g, std::int64_t total) {
  for (std::int64_t o = grid_start(); o < total; o += grid_stride()) {
    std::int64_t rest = o, offset = 0;
    for (int i = g.ndim - 1; i >= 0; --i) {
      offset += (rest % g.out_size[i]) * g.in_stride[i];
      rest /= g.out_size[i];
    }
    y[o] = x[offset];
  }
}

}  // namespace

void permute_cuda(const Tensor& x, Tensor& y, const PermuteGeometry& g) {
  const std::int64_t total = y.numel();
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    permute_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(device_ptr<T>(x), device_ptr<T>(y), g,
                                                              total);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::detail
