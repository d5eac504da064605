// GELU (tanh form): the CPU loops and the dispatch to gelu.cu.
#include <cmath>

#include "dispatch.h"
#include "mgpu/nn/activation.h"
#include "parallel_for.h"
#ifdef MGPU_WITH_CUDA
#include "nn/transformer_kernels_cuda.h"
#endif

namespace mgpu::nn {
namespace {

// √(2/π) and the cubic's coefficient of GPT-2's approximation.
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

// tanh in double as the C library computes it; in float as 1 − 2/(1 + e^{2u}), which is
// exact at both ends (e^{2u} = ∞ gives 1, 0 gives −1) and within a few float ulps of 1 in
// absolute terms: GELU needs 1 + tanh, so an absolute error is what counts. libm's tanhf
// was 30% of a gpt-tiny training step on the CPU; expf costs a fraction of it.
inline double tanh_of(double u) { return std::tanh(u); }
inline float tanh_of(float u) { return 1.0f - 2.0f / (1.0f + std::exp(2.0f * u)); }

template <typename A>
A gelu_value(A x) {
  const A t = tanh_of(static_cast<A>(kSqrt2OverPi) * (x + static_cast<A>(kCubic) * x * x * x));
  return static_cast<A>(0.5) * x * (static_cast<A>(1) + t);
}

template <typename A>
A gelu_slope(A x) {
  const A inner = static_cast<A>(kSqrt2OverPi) * (x + static_cast<A>(kCubic) * x * x * x);
  const A t = tanh_of(inner);
  const A d_inner = static_cast<A>(kSqrt2OverPi) * (static_cast<A>(1) + static_cast<A>(3 * kCubic) * x * x);
  return static_cast<A>(0.5) * (static_cast<A>(1) + t) +
         static_cast<A>(0.5) * x * (static_cast<A>(1) - t * t) * d_inner;
}

}  // namespace

Tensor gelu(const Tensor& x) {
  check_defined("gelu", x, "input");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::gelu_cuda(x, y));
    return y;
  }
  mgpu::detail::dispatch_floating(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    mgpu::detail::parallel_for(0, x.numel(), mgpu::detail::kGrainSize / 8, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        py[i] = mgpu::detail::from_compute<T>(gelu_value(mgpu::detail::to_compute(px[i])));
    });
  });
  return y;
}

Tensor gelu_backward(const Tensor& grad_out, const Tensor& x) {
  check_defined("gelu_backward", grad_out, "grad_out");
  check_defined("gelu_backward", x, "input");
  check_same_shape("gelu_backward", grad_out, x);
  check_same_dtype("gelu_backward", grad_out, x);
  MGPU_CHECK(grad_out.device() == x.device(), "gelu_backward: grad_out is on ",
             grad_out.device().str(), " but the input is on ", x.device().str());
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return dx;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::gelu_backward_cuda(grad_out, x, dx));
    return dx;
  }
  mgpu::detail::dispatch_floating(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = grad_out.data<T>();
    const T* px = x.data<T>();
    T* pd = dx.data<T>();
    mgpu::detail::parallel_for(0, x.numel(), mgpu::detail::kGrainSize / 8, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        pd[i] = mgpu::detail::from_compute<T>(mgpu::detail::to_compute(pg[i]) *
                                        gelu_slope(mgpu::detail::to_compute(px[i])));
    });
  });
  return dx;
}

}  // namespace mgpu::nn
