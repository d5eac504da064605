// CUDA twin of the AdamW loop in adamw.cpp: one thread per element, all four tensors read
// and written once (a fused kernel instead of a dozen elementwise ops), with the CPU's
// roundings, so both give the same bits.
#include "ops/cuda_util.cuh"
#include "optim/adamw_cuda.h"

namespace mgpu::optim::detail {

template <typename T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, compute_t<T> step_size,
                             compute_t<T> sqrt_bc2, compute_t<T> decay, compute_t<T> b1,
                             compute_t<T> b2, compute_t<T> eps, std::int64_t n) {
  using A = compute_t<T>;
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    // Every product through mul_rn: nvcc would fuse a*b + c into one FMA (one rounding where
    // the CPU loop rounds twice), and the update is meant to give the CPU's bits. sqrt and
    // the division are IEEE-rounded on both (nvcc's default -prec-sqrt and -prec-div).
    const A gi = to_compute(g[i]);
    const A mi = mul_rn(b1, to_compute(m[i])) + mul_rn(A(1) - b1, gi);
    const A vi = mul_rn(b2, to_compute(v[i])) + mul_rn(mul_rn(A(1) - b2, gi), gi);
    const A denom = sqrt(vi) / sqrt_bc2 + eps;
    m[i] = from_compute<T>(mi);
    v[i] = from_compute<T>(vi);
    p[i] = from_compute<T>(mul_rn(to_compute(p[i]), decay) - mul_rn(step_size, mi) / denom);
  }
}

void adamw_update_cuda(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double beta1,
                       double beta2, double eps, double weight_decay, double bias_correction1,
                       double bias_correction2) {
  // The scalars are computed in double and rounded once to the kernel's compute type.
  launch_grid_stride("adamw_update_", p, [](auto tag) { return adamw_kernel<decltype(tag)>; },
                     p, g, m, v, lr / bias_correction1, std::sqrt(bias_correction2),
                     1.0 - lr * weight_decay, beta1, beta2, eps);
}

}  // namespace mgpu::optim::detail
