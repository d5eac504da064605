// CUDA twins of pool.cpp: max pooling forward and backward.
#include "nn/kernels_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::nn::detail {

// One thread per output element; it scans its k x k window in the same order as the CPU
// loop, so ties resolve to the same (first) element on both.
template <typename T>
__global__ void max_pool2d_kernel(const T* x, T* y, std::int64_t* argmax, std::int64_t total,
                                  std::int64_t H, std::int64_t W, std::int64_t k,
                                  std::int64_t s) {
  const std::int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
  for (std::int64_t o = grid_start(); o < total; o += grid_stride()) {
    const std::int64_t ow = o % Wo, oh = (o / Wo) % Ho, plane = o / (Wo * Ho);
    const T* in = x + plane * H * W;
    std::int64_t best_at = oh * s * W + ow * s;
    compute_t<T> best = to_compute(in[best_at]);
    for (std::int64_t kh = 0; kh < k; ++kh)
      for (std::int64_t kw = 0; kw < k; ++kw) {
        const std::int64_t at = (oh * s + kh) * W + (ow * s + kw);
        const compute_t<T> v = to_compute(in[at]);
        if (v > best) {
          best = v;
          best_at = at;
        }
      }
    y[o] = in[best_at];
    argmax[o] = best_at;
  }
}

// One thread per input element: it visits only the windows that cover it (at most
// ceil(k/s)^2) and adds the gradient of those whose maximum it was. No atomics needed,
// even when windows overlap (stride < kernel).
template <typename T>
__global__ void max_pool2d_backward_kernel(const T* g, const std::int64_t* argmax, T* dx,
                                           std::int64_t total, std::int64_t H, std::int64_t W,
                                           std::int64_t k, std::int64_t s) {
  const std::int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const std::int64_t w = i % W, h = (i / W) % H, plane = i / (W * H);
    const std::int64_t oh_lo = h >= k ? (h - k) / s + 1 : 0;
    const std::int64_t oh_hi = min(h / s, Ho - 1);
    const std::int64_t ow_lo = w >= k ? (w - k) / s + 1 : 0;
    const std::int64_t ow_hi = min(w / s, Wo - 1);
    compute_t<T> acc = 0;
    for (std::int64_t oh = oh_lo; oh <= oh_hi; ++oh)
      for (std::int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const std::int64_t o = (plane * Ho + oh) * Wo + ow;
        if (argmax[o] == h * W + w) acc += to_compute(g[o]);
      }
    dx[i] = from_compute<T>(acc);
  }
}

void max_pool2d_cuda(const Tensor& x, Tensor& y, Tensor& argmax, std::int64_t kernel,
                     std::int64_t stride) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool2d_kernel<T><<<grid_for(y.numel()), kBlock, 0, stream>>>(
        device_ptr<T>(x), device_ptr<T>(y), device_ptr<std::int64_t>(argmax), y.numel(),
        x.size(2), x.size(3), kernel, stride);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void max_pool2d_backward_cuda(const Tensor& grad_out, const Tensor& argmax, Tensor& grad_in,
                              std::int64_t kernel, std::int64_t stride) {
  cudaStream_t stream = launch_stream(grad_in.device());
  dispatch_cuda_floating(grad_in.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    max_pool2d_backward_kernel<T><<<grid_for(grad_in.numel()), kBlock, 0, stream>>>(
        device_ptr<T>(grad_out), device_ptr<std::int64_t>(argmax), device_ptr<T>(grad_in),
        grad_in.numel(), grad_in.size(2), grad_in.size(3), kernel, stride);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::nn::detail
