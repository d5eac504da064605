// softmax and its backward over the last axis: checks, CPU loops, dispatch to softmax.cu.
#include <algorithm>
#include <cmath>

#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "parallel_for.h"
#ifdef MGPU_WITH_CUDA
#include "ops/softmax_cuda.h"
#endif

namespace mgpu {
namespace {

constexpr std::int64_t kRowsGrain = 64;

std::int64_t last(const Tensor& t) { return t.size(t.ndim() - 1); }

}  // namespace

Tensor softmax(const Tensor& x, bool causal) {
  detail::check_floating("softmax", "x", x);
  MGPU_CHECK(x.ndim() >= 1 && last(x) >= 1, "softmax: x is ", x.str(),
             "; it needs a last axis of at least one value");
  MGPU_CHECK(!causal || (x.ndim() >= 2 && x.size(x.ndim() - 2) == last(x)), "softmax: x is ",
             x.str(), "; the causal mask needs square [..., T, T] scores");
  const std::int64_t n = last(x), rows = x.numel() / n;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0) return y;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::softmax_cuda(x, y, rows, n, causal));
    return y;
  }
  detail::dispatch_floating(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    using A = detail::compute_t<T>;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    detail::parallel_for(0, rows, kRowsGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        // With the mask, query t = r % T sees keys 0..t.
        const std::int64_t seen = causal ? r % n + 1 : n;
        const T* xr = px + r * n;
        T* yr = py + r * n;
        A peak = detail::to_compute(xr[0]);
        for (std::int64_t j = 1; j < seen; ++j) peak = std::max(peak, A(detail::to_compute(xr[j])));
        A sum = 0;
        for (std::int64_t j = 0; j < seen; ++j) sum += std::exp(A(detail::to_compute(xr[j])) - peak);
        for (std::int64_t j = 0; j < n; ++j)
          yr[j] = detail::from_compute<T>(
              j < seen ? std::exp(A(detail::to_compute(xr[j])) - peak) / sum : A(0));
      }
    });
  });
  return y;
}

Tensor softmax_backward(const Tensor& grad_out, const Tensor& y) {
  detail::check_floating("softmax_backward", "y", y);
  detail::check_compatible("softmax_backward", "grad_out", grad_out, "y", y);
  check_same_shape("softmax_backward", grad_out, y);
  const std::int64_t n = last(y), rows = n > 0 ? y.numel() / n : 0;
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  if (rows == 0) return dx;
  if (y.device().is_cuda()) {
    MGPU_IF_CUDA(detail::softmax_backward_cuda(grad_out, y, dx, rows, n));
    return dx;
  }
  detail::dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = detail::compute_t<T>;
    const T* pg = grad_out.data<T>();
    const T* py = y.data<T>();
    T* pd = dx.data<T>();
    detail::parallel_for(0, rows, kRowsGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const T* gr = pg + r * n;
        const T* yr = py + r * n;
        A dot = 0;
        for (std::int64_t j = 0; j < n; ++j) dot += A(detail::to_compute(gr[j])) * A(detail::to_compute(yr[j]));
        for (std::int64_t j = 0; j < n; ++j)
          pd[r * n + j] = detail::from_compute<T>(A(detail::to_compute(yr[j])) *
                                                  (A(detail::to_compute(gr[j])) - dot));
      }
    });
  });
  return dx;
}

}  // namespace mgpu
