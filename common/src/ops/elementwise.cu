// Elementwise ops on CUDA. Each is a grid-stride loop: thread t of the grid handles
// elements t, t + W, t + 2W, ... (W = the grid's width), so a warp always reads 32
// consecutive elements (one coalesced transaction) and any n works with any grid.
// 16-bit elements are widened to float, computed, and rounded once, as on the CPU.
#include "cuda_util.cuh"
#include "ops_cuda.h"

namespace mgpu::detail {

template <typename T>
__global__ void binary_kernel(BinaryOp op, T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const compute_t<T> x = to_compute(a[i]);
    const compute_t<T> y = to_compute(b[i]);
    // `op` is the same for every thread, so this branch never diverges within a warp.
    const compute_t<T> r = op == BinaryOp::add ? x + y : op == BinaryOp::sub ? x - y : x * y;
    out[i] = from_compute<T>(r);
  }
}

void binary_cuda(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  const std::int64_t n = a.numel();
  cudaStream_t stream = launch_stream(a.device());
  dispatch_cuda_floating(a.dtype(), "binary op", [&](auto tag) {
    using T = decltype(tag);
    binary_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(op, device_ptr<T>(out),
                                                         device_ptr<T>(a), device_ptr<T>(b), n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
__global__ void scale_kernel(T* out, const T* a, compute_t<T> alpha, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = from_compute<T>(alpha * to_compute(a[i]));
}

void scale_cuda(Tensor& out, const Tensor& a, double alpha) {
  const std::int64_t n = a.numel();
  cudaStream_t stream = launch_stream(a.device());
  dispatch_cuda_floating(a.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(
        device_ptr<T>(out), device_ptr<T>(a), static_cast<compute_t<T>>(alpha), n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

// y += alpha * x. mul_rn keeps the product a separate rounding step (no FMA), which is
// what the CPU loop computes; an FMA would be slightly more accurate but not comparable.
template <typename T>
__global__ void axpy_kernel(T* y, const T* x, compute_t<T> alpha, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    y[i] = from_compute<T>(to_compute(y[i]) + mul_rn(alpha, to_compute(x[i])));
}

void axpy_cuda(Tensor& y, double alpha, const Tensor& x) {
  const std::int64_t n = y.numel();
  cudaStream_t stream = launch_stream(y.device());
  dispatch_cuda_floating(y.dtype(), "axpy_", [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(device_ptr<T>(y), device_ptr<T>(x),
                                                       static_cast<compute_t<T>>(alpha), n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

// y viewed as [rows, cols]: flat element i lies in column i % cols, so it gets bias[i % cols].
// The bias (a few KB) stays in L1/L2 cache while the grid streams through y.
template <typename T>
__global__ void add_rowwise_kernel(T* y, const T* bias, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    y[i] = from_compute<T>(to_compute(y[i]) + to_compute(bias[i % cols]));
}

void add_rowwise_cuda(Tensor& y, const Tensor& bias) {
  const std::int64_t n = y.numel();
  cudaStream_t stream = launch_stream(y.device());
  dispatch_cuda_floating(y.dtype(), "add_rowwise_", [&](auto tag) {
    using T = decltype(tag);
    add_rowwise_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(
        device_ptr<T>(y), device_ptr<T>(bias), n, bias.numel());
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

// relu(x) = x where x > 0, else 0 (NaN -> 0, as on the CPU).
template <typename T>
__global__ void relu_kernel(T* out, const T* x, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = to_compute(x[i]) > 0 ? x[i] : from_compute<T>(0);
}

void relu_cuda(Tensor& out, const Tensor& x) {
  const std::int64_t n = x.numel();
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "relu", [&](auto tag) {
    using T = decltype(tag);
    relu_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(device_ptr<T>(out), device_ptr<T>(x), n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

// The gradient passes where the forward input was positive and is 0 elsewhere.
template <typename T>
__global__ void relu_backward_kernel(T* grad_in, const T* grad_out, const T* x, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    grad_in[i] = to_compute(x[i]) > 0 ? grad_out[i] : from_compute<T>(0);
}

void relu_backward_cuda(Tensor& grad_in, const Tensor& grad_out, const Tensor& x) {
  const std::int64_t n = x.numel();
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    relu_backward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(
        device_ptr<T>(grad_in), device_ptr<T>(grad_out), device_ptr<T>(x), n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::detail
