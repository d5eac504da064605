// Elementwise ops on CUDA. Each is a grid-stride loop: thread t of the grid handles
// elements t, t + W, t + 2W, ... (W = the grid's width), so a warp always reads 32
// consecutive elements (one coalesced transaction) and any n works with any grid.
// 16-bit elements are widened to float, computed, and rounded once, as on the CPU.
// Every launcher is the same (grid, stream, dtype, check): launch_grid_stride in cuda_util.cuh.
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
  launch_grid_stride("binary op", a, [](auto tag) { return binary_kernel<decltype(tag)>; },
                     op, out, a, b);
}

template <typename T>
__global__ void scale_kernel(T* out, const T* a, compute_t<T> alpha, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = from_compute<T>(alpha * to_compute(a[i]));
}

void scale_cuda(Tensor& out, const Tensor& a, double alpha) {
  launch_grid_stride("scale", a, [](auto tag) { return scale_kernel<decltype(tag)>; },
                     out, a, alpha);
}

// y += alpha * x. mul_rn keeps the product a separate rounding step (no FMA), which is
// what the CPU loop computes; an FMA would be slightly more accurate but not comparable.
template <typename T>
__global__ void axpy_kernel(T* y, const T* x, compute_t<T> alpha, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    y[i] = from_compute<T>(to_compute(y[i]) + mul_rn(alpha, to_compute(x[i])));
}

void axpy_cuda(Tensor& y, double alpha, const Tensor& x) {
  launch_grid_stride("axpy_", y, [](auto tag) { return axpy_kernel<decltype(tag)>; },
                     y, x, alpha);
}

// y viewed as [rows, cols]: flat element i lies in column i % cols, so it gets bias[i % cols].
// The bias (a few KB) stays in L1/L2 cache while the grid streams through y.
template <typename T>
__global__ void add_rowwise_kernel(T* y, const T* bias, std::int64_t cols, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    y[i] = from_compute<T>(to_compute(y[i]) + to_compute(bias[i % cols]));
}

void add_rowwise_cuda(Tensor& y, const Tensor& bias) {
  launch_grid_stride("add_rowwise_", y, [](auto tag) { return add_rowwise_kernel<decltype(tag)>; },
                     y, bias, bias.numel());
}

// relu(x) = x where x > 0, else 0 (NaN -> 0, as on the CPU).
template <typename T>
__global__ void relu_kernel(T* out, const T* x, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = to_compute(x[i]) > 0 ? x[i] : from_compute<T>(0);
}

void relu_cuda(Tensor& out, const Tensor& x) {
  launch_grid_stride("relu", x, [](auto tag) { return relu_kernel<decltype(tag)>; },
                     out, x);
}

// The gradient passes where the forward input was positive and is 0 elsewhere.
template <typename T>
__global__ void relu_backward_kernel(T* grad_in, const T* grad_out, const T* x, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    grad_in[i] = to_compute(x[i]) > 0 ? grad_out[i] : from_compute<T>(0);
}

void relu_backward_cuda(Tensor& grad_in, const Tensor& grad_out, const Tensor& x) {
  launch_grid_stride("relu_backward", x,
                     [](auto tag) { return relu_backward_kernel<decltype(tag)>; },
                     grad_in, grad_out, x);
}

}  // namespace mgpu::detail
