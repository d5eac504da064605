// CUDA twins of batchnorm_kernels.cpp. The input is [N, C, S]; channel c's values sit at
// (n*C + c)*S + s: S contiguous values, then a jump of C*S to the next sample.
#include "nn/kernels_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::nn::detail {

// One block per channel (blockIdx.x = c). Threads stride over the channel's N*S values:
// thread t takes j = t, t + blockDim, ... and finds the element as (n, s) = (j / S, j % S).
// Consecutive threads read consecutive s, so the reads are coalesced within each sample.
// Pass 1 sums to the mean; pass 2 sums squared deviations from it (stable for large means).
template <typename T, typename A>
__global__ void bn_stats_kernel(const T* x, A* mean_out, A* var_out, std::int64_t N,
                                std::int64_t C, std::int64_t S) {
  const std::int64_t c = blockIdx.x;
  const std::int64_t count = N * S;
  A sum = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x)
    sum += static_cast<A>(to_compute(x[((j / S) * C + c) * S + j % S]));
  const A mean = block_reduce(sum, SumOp{}, A(0)) / static_cast<A>(count);
  A sq = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const A dev = static_cast<A>(to_compute(x[((j / S) * C + c) * S + j % S])) - mean;
    sq += dev * dev;
  }
  sq = block_reduce(sq, SumOp{}, A(0));
  if (threadIdx.x == 0) {
    mean_out[c] = mean;
    var_out[c] = sq / static_cast<A>(count);
  }
}

template <typename A>
__global__ void bn_invstd_kernel(const A* var, A* invstd, std::int64_t C, double eps) {
  for (std::int64_t c = grid_start(); c < C; c += grid_stride())
    invstd[c] = static_cast<A>(1.0 / sqrt(static_cast<double>(var[c]) + eps));
}

// Elementwise: one thread per element; its channel is (i / S) % C.
template <typename T, typename A>
__global__ void bn_apply_kernel(const T* x, const A* mean, const A* invstd, const T* weight,
                                const T* bias, T* y, std::int64_t total, std::int64_t C,
                                std::int64_t S) {
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const std::int64_t c = (i / S) % C;
    const A w = weight ? static_cast<A>(to_compute(weight[c])) : A(1);
    const A b = bias ? static_cast<A>(to_compute(bias[c])) : A(0);
    const A xhat = (static_cast<A>(to_compute(x[i])) - mean[c]) * invstd[c];
    y[i] = from_compute<T>(static_cast<compute_t<T>>(xhat * w + b));
  }
}

// One block per channel, like bn_stats_kernel: sum(dy) and sum(dy * (x - mean)).
template <typename T, typename A>
__global__ void bn_backward_reduce_kernel(const T* g, const T* x, const A* mean, A* sum_dy,
                                          A* sum_dy_xmu, std::int64_t N, std::int64_t C,
                                          std::int64_t S) {
  const std::int64_t c = blockIdx.x;
  const std::int64_t count = N * S;
  const A m = mean[c];
  A sdy = 0, sdyx = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const std::int64_t i = ((j / S) * C + c) * S + j % S;
    const A dy = static_cast<A>(to_compute(g[i]));
    sdy += dy;
    sdyx += dy * (static_cast<A>(to_compute(x[i])) - m);
  }
  sdy = block_reduce(sdy, SumOp{}, A(0));
  sdyx = block_reduce(sdyx, SumOp{}, A(0));
  if (threadIdx.x == 0) {
    sum_dy[c] = sdy;
    sum_dy_xmu[c] = sdyx;
  }
}

template <typename T, typename A>
__global__ void bn_backward_apply_kernel(const T* g, const T* x, const A* mean, const A* invstd,
                                         const T* weight, const A* sum_dy, const A* sum_dy_xmu,
                                         A inv_count, T* dx, std::int64_t total, std::int64_t C,
                                         std::int64_t S) {
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const std::int64_t c = (i / S) % C;
    const A is = invstd[c];
    const A w = weight ? static_cast<A>(to_compute(weight[c])) : A(1);
    const A mean_dy = sum_dy[c] * inv_count;
    const A proj = sum_dy_xmu[c] * inv_count * is * is;
    const A xmu = static_cast<A>(to_compute(x[i])) - mean[c];
    const A dy = static_cast<A>(to_compute(g[i]));
    dx[i] = from_compute<T>(static_cast<compute_t<T>>((dy - mean_dy - xmu * proj) * is * w));
  }
}

namespace {
/// Calls f(T, A) with T the device storage type and A the statistics type.
template <typename F>
void dispatch_bn_cuda(DType dtype, const char* op, F&& f) {
  dispatch_cuda_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;  // float, or double for f64
    f(T{}, A{});
  });
}

template <typename T>
const T* optional_ptr(const Tensor& t) {
  return t.defined() ? device_ptr<T>(t) : nullptr;
}
}  // namespace

void bn_stats_cuda(const Tensor& x, NCS d, Tensor& mean, Tensor& var) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_bn_cuda(x.dtype(), "batch_norm_stats", [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    bn_stats_kernel<T, A><<<static_cast<unsigned>(d.c), kBlock, 0, stream>>>(
        device_ptr<T>(x), device_ptr<A>(mean), device_ptr<A>(var), d.n, d.c, d.s);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void bn_invstd_cuda(const Tensor& var, double eps, Tensor& invstd) {
  cudaStream_t stream = launch_stream(var.device());
  const std::int64_t C = var.numel();
  if (var.dtype() == DType::f64) {
    bn_invstd_kernel<double><<<grid_for(C), kBlock, 0, stream>>>(
        device_ptr<double>(var), device_ptr<double>(invstd), C, eps);
  } else {
    bn_invstd_kernel<float><<<grid_for(C), kBlock, 0, stream>>>(
        device_ptr<float>(var), device_ptr<float>(invstd), C, eps);
  }
  MGPU_CUDA_CHECK_LAUNCH();
}

void bn_apply_cuda(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                   const Tensor& weight, const Tensor& bias, Tensor& y, NCS d) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_bn_cuda(x.dtype(), "batch_norm_apply", [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    bn_apply_kernel<T, A><<<grid_for(y.numel()), kBlock, 0, stream>>>(
        device_ptr<T>(x), device_ptr<A>(mean), device_ptr<A>(invstd), optional_ptr<T>(weight),
        optional_ptr<T>(bias), device_ptr<T>(y), y.numel(), d.c, d.s);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void bn_backward_reduce_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                             Tensor& sum_dy, Tensor& sum_dy_xmu, NCS d) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_bn_cuda(x.dtype(), "batch_norm_backward_reduce", [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    bn_backward_reduce_kernel<T, A><<<static_cast<unsigned>(d.c), kBlock, 0, stream>>>(
        device_ptr<T>(grad_out), device_ptr<T>(x), device_ptr<A>(mean), device_ptr<A>(sum_dy),
        device_ptr<A>(sum_dy_xmu), d.n, d.c, d.s);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void bn_backward_apply_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                            const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                            const Tensor& sum_dy_xmu, std::int64_t count, Tensor& grad_in,
                            NCS d) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_bn_cuda(x.dtype(), "batch_norm_backward_apply", [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    bn_backward_apply_kernel<T, A><<<grid_for(grad_in.numel()), kBlock, 0, stream>>>(
        device_ptr<T>(grad_out), device_ptr<T>(x), device_ptr<A>(mean), device_ptr<A>(invstd),
        optional_ptr<T>(weight), device_ptr<A>(sum_dy), device_ptr<A>(sum_dy_xmu),
        A(1) / static_cast<A>(count), device_ptr<T>(grad_in), grad_in.numel(), d.c, d.s);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::nn::detail
