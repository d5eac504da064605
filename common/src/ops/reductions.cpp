// Reductions: sum/mean of a whole tensor or along one axis, max/argmax along the last
// axis. The CPU loops accumulate in double (a tighter reference than the GPU's f32
// accumulation for f32/f16/bf16); the results are rounded to the output dtype once. Along
// an axis, the outputs are shared among the library's threads and each output adds its
// terms in the same order as on one thread: the thread count never changes a result.
#include <algorithm>
#include <limits>

#include "argmax_rule.h"
#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "ops_cuda.h"
#include "parallel_for.h"

namespace mgpu {
namespace {

using detail::kGrainSize;
using detail::parallel_for;
using detail::to_compute;

// Sum of n consecutive elements in double. Eight partial sums: one running sum is a chain
// of dependent adds, each waiting for the last (about 4 cycles apiece); eight independent
// chains keep the adder busy. The order is fixed, so the result is the same bits every run.
template <typename T>
double sum_contiguous(const T* p, std::int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) part[l] += to_compute(p[i + l]);
  for (; i < n; ++i) part[0] += to_compute(p[i]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

Tensor sum_all(const Tensor& x, bool mean, const char* name) {
  detail::check_floating(name, "x", x);
  Tensor out = Tensor::empty({}, detail::accumulate_dtype(x.dtype()), x.device());
  const std::int64_t n = x.numel();
  if (x.device().is_cuda()) {
    // An empty sum is 0 and an empty mean is 0/0 = NaN; no kernel needed for either.
    if (n == 0) {
      fill_(out, mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    } else {
      MGPU_IF_CUDA(detail::sum_all_cuda(out, x, mean));
    }
    return out;
  }
  detail::dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    const double acc = sum_contiguous(p, n);
    const double result = mean ? acc / static_cast<double>(n) : acc;  // 0/0 = NaN when empty
    if (out.dtype() == DType::f64) {
      *out.data<double>() = result;
    } else {
      *out.data<float>() = static_cast<float>(result);
    }
  });
  return out;
}

Tensor sum_axis(const Tensor& x, int axis, bool mean, const char* name) {
  detail::check_floating(name, "x", x);
  const int nd = x.ndim();
  MGPU_CHECK(axis >= -nd && axis < nd, name, ": axis ", axis, " is out of range for x ",
             x.str(), nd == 0 ? " (a scalar has no axes)" : "");
  if (axis < 0) axis += nd;
  // x viewed as [outer, n, inner]: the reduced axis in the middle.
  const Shape& s = x.shape();
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < nd; ++d) inner *= s[d];
  const std::int64_t n = s[axis];
  Shape out_shape = s;
  out_shape.erase(out_shape.begin() + axis);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::sum_axis_cuda(out, x, outer, n, inner, mean));
    return out;
  }
  detail::dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    if (inner == 1) {  // the last axis: each output sums one contiguous row
      parallel_for(0, outer, kGrainSize / std::max<std::int64_t>(n, 1) + 1,
                   [&](std::int64_t o0, std::int64_t o1) {
                     for (std::int64_t o = o0; o < o1; ++o) {
                       const double acc = sum_contiguous(px + o * n, n);
                       po[o] = detail::from_compute<T>(mean ? acc / static_cast<double>(n) : acc);
                     }
                   });
      return;
    }
    // Otherwise walk x in memory order (j outer, k inner), kColumns outputs at a time with
    // one accumulator each: reading down one column instead would touch a new cache line
    // for every element. Each (o, column tile) is a task of its own.
    constexpr std::int64_t kColumns = 16;  // a 64-byte cache line of f32
    const std::int64_t tiles = detail::num_blocks(inner, kColumns);
    const std::int64_t tile_work = std::max<std::int64_t>(n * std::min(inner, kColumns), 1);
    parallel_for(0, outer * tiles, kGrainSize / tile_work + 1, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t o = t / tiles, k0 = t % tiles * kColumns;
        const std::int64_t width = std::min(kColumns, inner - k0);
        double acc[kColumns] = {};
        for (std::int64_t j = 0; j < n; ++j) {
          const T* row = px + (o * n + j) * inner + k0;
          for (std::int64_t k = 0; k < width; ++k) acc[k] += to_compute(row[k]);
        }
        for (std::int64_t k = 0; k < width; ++k)
          po[o * inner + k0 + k] =
              detail::from_compute<T>(mean ? acc[k] / static_cast<double>(n) : acc[k]);
      }
    });
  });
  return out;
}

// Row maxima and/or their indices of x viewed as [rows, n].
void max_last_impl(Tensor* max_out, Tensor* arg_out, const Tensor& x, const char* name) {
  detail::check_floating(name, "x", x);
  MGPU_CHECK(x.ndim() >= 1, name, ": x is ", x.str(), "; a scalar has no last axis");
  const std::int64_t n = x.shape().back();
  MGPU_CHECK(n > 0, name, ": the last axis of x ", x.str(), " is empty, so it has no maximum");
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  if (max_out) *max_out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (arg_out) *arg_out = Tensor::empty(out_shape, DType::i64, x.device());
  const std::int64_t rows = x.numel() / n;
  if (rows == 0) return;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::max_last_cuda(max_out, arg_out, x, rows, n));
    return;
  }
  detail::dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = px + r * n;
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < n; ++j)
        if (detail::argmax_better(to_compute(row[j]), j, to_compute(row[best]), best)) best = j;
      if (max_out) max_out->data<T>()[r] = row[best];
      if (arg_out) arg_out->data<std::int64_t>()[r] = best;
    }
  });
}

}  // namespace

Tensor sum(const Tensor& x) { return sum_all(x, false, "sum"); }
Tensor mean(const Tensor& x) { return sum_all(x, true, "mean"); }
Tensor sum(const Tensor& x, int axis) { return sum_axis(x, axis, false, "sum"); }
Tensor mean(const Tensor& x, int axis) { return sum_axis(x, axis, true, "mean"); }

Tensor max_last(const Tensor& x) {
  Tensor out;
  max_last_impl(&out, nullptr, x, "max_last");
  return out;
}

Tensor argmax_last(const Tensor& x) {
  Tensor out;
  max_last_impl(nullptr, &out, x, "argmax_last");
  return out;
}

}  // namespace mgpu
