// CUDA twin of the AdamW loop in adamw.cpp: one thread per element, all four tensors read
// and written once (a fused kernel instead of a dozen elementwise ops).
#include "ops/cuda_util.cuh"
#include "optim/adamw_cuda.h"

namespace mgpu::optim::detail {

template <typename T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, std::int64_t n, compute_t<T> step_size,
                             compute_t<T> sqrt_bc2, compute_t<T> decay, compute_t<T> b1, compute_t<T> b2,
                             compute_t<T> eps) {
  using A = compute_t<T>;
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const A gi = to_compute(g[i]);
    const A mi = b1 * to_compute(m[i]) + (A(1) - b1) * gi;
    const A vi = b2 * to_compute(v[i]) + (A(1) - b2) * gi * gi;
    const A denom = sqrt(vi) / sqrt_bc2 + eps;
    m[i] = from_compute<T>(mi);
    v[i] = from_compute<T>(vi);
    p[i] = from_compute<T>(to_compute(p[i]) * decay - step_size * mi / denom);
  }
}

void adamw_update_cuda(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double beta1,
                       double beta2, double eps, double weight_decay, double bias_correction1,
                       double bias_correction2) {
  cudaStream_t stream = launch_stream(p.device());
  dispatch_cuda_floating(p.dtype(), "adamw_update_", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    adamw_kernel<T><<<grid_for(p.numel()), kBlock, 0, stream>>>(
        device_ptr<T>(p), device_ptr<T>(g), device_ptr<T>(m), device_ptr<T>(v), p.numel(),
        static_cast<A>(lr / bias_correction1), static_cast<A>(std::sqrt(bias_correction2)),
        static_cast<A>(1.0 - lr * weight_decay), static_cast<A>(beta1), static_cast<A>(beta2),
        static_cast<A>(eps));
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::optim::detail
