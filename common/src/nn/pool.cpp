// Max pooling on the CPU and the dispatch to pool.cu. Backward scatters each output
// gradient onto its window's maximum; the CUDA kernel gathers the same sums (no atomics).
// The CPU loops share the (n, c) planes among the library's threads: planes are
// independent, so the thread count never changes a result.
#include <algorithm>
#include <vector>

#include "dispatch.h"
#include "mgpu/nn/functional.h"
#include "parallel_for.h"
#ifdef MGPU_WITH_CUDA
#include "nn/kernels_cuda.h"
#endif

namespace mgpu::nn {

namespace {

/// Planes per task: each is about H * W values' work.
std::int64_t plane_grain(std::int64_t H, std::int64_t W) {
  return mgpu::detail::kGrainSize / std::max<std::int64_t>(H * W, 1) + 1;
}

template <typename T>
void max_pool2d_cpu(const T* x, T* y, std::int64_t* argmax, std::int64_t planes, std::int64_t H,
                    std::int64_t W, std::int64_t k, std::int64_t s) {
  using A = mgpu::detail::compute_t<T>;
  const std::int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
  mgpu::detail::parallel_for(0, planes, plane_grain(H, W), [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const T* in = x + p * H * W;
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          std::int64_t best_at = oh * s * W + ow * s;
          A best = mgpu::detail::to_compute(in[best_at]);
          for (std::int64_t kh = 0; kh < k; ++kh)
            for (std::int64_t kw = 0; kw < k; ++kw) {
              const std::int64_t at = (oh * s + kh) * W + (ow * s + kw);
              const A v = mgpu::detail::to_compute(in[at]);
              // Strict: the first maximum wins ties. Selects, not a branch: which value of
              // a window is largest is a coin flip the branch predictor keeps losing.
              const bool larger = v > best;
              best = larger ? v : best;
              best_at = larger ? at : best_at;
            }
          const std::int64_t o = (p * Ho + oh) * Wo + ow;
          y[o] = in[best_at];
          argmax[o] = best_at;
        }
    }
  });
}

template <typename T>
void max_pool2d_backward_cpu(const T* g, const std::int64_t* argmax, T* dx, std::int64_t planes,
                             std::int64_t H, std::int64_t W, std::int64_t k, std::int64_t s) {
  using A = mgpu::detail::compute_t<T>;
  const std::int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
  // Scatter each output gradient onto its window's maximum, outputs in increasing order:
  // with overlapping windows a pixel gets its terms in the order the CUDA gather adds them.
  mgpu::detail::parallel_for(0, planes, plane_grain(H, W), [&](std::int64_t p0, std::int64_t p1) {
    std::vector<A> acc(static_cast<std::size_t>(H * W));  // one plane's sums, per task
    for (std::int64_t p = p0; p < p1; ++p) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (std::int64_t o = p * Ho * Wo; o < (p + 1) * Ho * Wo; ++o)
        acc[static_cast<std::size_t>(argmax[o])] += mgpu::detail::to_compute(g[o]);
      for (std::int64_t i = 0; i < H * W; ++i)
        dx[p * H * W + i] = mgpu::detail::from_compute<T>(acc[static_cast<std::size_t>(i)]);
    }
  });
}

void check_pool(const char* op, const Shape& in, std::int64_t k, std::int64_t s) {
  MGPU_CHECK(in.size() == 4, op, ": input shape ", shape_str(in), " is not [N, C, H, W]");
  MGPU_CHECK(k >= 1 && s >= 1, op, ": kernel ", k, " and stride ", s, " must be >= 1");
  MGPU_CHECK(in[2] >= k && in[3] >= k, op, ": the ", k, "x", k, " window does not fit the ",
             in[2], "x", in[3], " input");
}

}  // namespace

Tensor max_pool2d(const Tensor& x, std::int64_t kernel, std::int64_t stride, Tensor* argmax) {
  check_defined("max_pool2d", x, "input");
  check_pool("max_pool2d", x.shape(), kernel, stride);
  MGPU_CHECK(argmax != nullptr, "max_pool2d: argmax output is null (backward needs it)");
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const Shape out{N, C, (H - kernel) / stride + 1, (W - kernel) / stride + 1};
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  *argmax = Tensor::empty(out, DType::i64, x.device());
  if (y.numel() == 0) return y;
  mgpu::detail::cpu_or_cuda(
      x, "max_pool2d", [&] { MGPU_IF_CUDA(detail::max_pool2d_cuda(x, y, *argmax, kernel, stride)); },
      [&](auto tag) {
        using T = decltype(tag);
        max_pool2d_cpu<T>(x.data<T>(), y.data<T>(), argmax->data<std::int64_t>(), N * C, H, W,
                          kernel, stride);
      });
  return y;
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& argmax, const Shape& input_shape,
                           std::int64_t kernel, std::int64_t stride) {
  check_defined("max_pool2d_backward", grad_out, "grad_out");
  check_defined("max_pool2d_backward", argmax, "argmax");
  check_pool("max_pool2d_backward", input_shape, kernel, stride);
  MGPU_CHECK(grad_out.shape() == argmax.shape() && argmax.dtype() == DType::i64 &&
                 grad_out.device() == argmax.device(),
             "max_pool2d_backward: grad_out ", grad_out.str(), " and argmax ", argmax.str(),
             " must have one shape and device, argmax i64");
  const std::int64_t H = input_shape[2], W = input_shape[3];
  const Shape expect{input_shape[0], input_shape[1], (H - kernel) / stride + 1,
                     (W - kernel) / stride + 1};
  MGPU_CHECK(grad_out.shape() == expect, "max_pool2d_backward: grad_out is ", grad_out.str(),
             " but the input ", shape_str(input_shape), " pools to ", shape_str(expect));
  Tensor dx = Tensor::empty(input_shape, grad_out.dtype(), grad_out.device());
  if (dx.numel() == 0) return dx;
  mgpu::detail::cpu_or_cuda(
      grad_out, "max_pool2d_backward", [&] { MGPU_IF_CUDA(detail::max_pool2d_backward_cuda(grad_out, argmax, dx, kernel, stride)); },
      [&](auto tag) {
        using T = decltype(tag);
        max_pool2d_backward_cpu<T>(grad_out.data<T>(), argmax.data<std::int64_t>(), dx.data<T>(),
                                   input_shape[0] * input_shape[1], H, W, kernel, stride);
      });
  return dx;
}

}  // namespace mgpu::nn
