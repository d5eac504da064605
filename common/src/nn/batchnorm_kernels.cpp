// Batch-norm statistics, normalisation and the two halves of its backward on the CPU, and
// the dispatch to batchnorm_kernels.cu. The input is viewed as [N, C, S]; every sum runs
// per channel c over its N*S values. The CPU sums in double, whatever the dtype: it is the
// reference the CUDA results are compared with. The CPU loops share channels (sums) or
// (n, c) planes (elementwise passes) among the library's threads; a channel's sum is
// always added in the same order (lane_sum), so the thread count never changes a result.
#include <algorithm>
#include <cmath>
#include <utility>

#include "dispatch.h"
#include "mgpu/nn/functional.h"
#include "mgpu/ops.h"
#include "parallel_for.h"
#ifdef MGPU_WITH_CUDA
#include "nn/kernels_cuda.h"
#endif

namespace mgpu::nn {

namespace {

struct NCS {
  std::int64_t n = 0, c = 0, s = 0;
};

NCS ncs_of(const char* op, const Tensor& x) {
  check_defined(op, x, "input");
  MGPU_CHECK(x.ndim() >= 2, op, ": input is ", x.str(), ", expected [N, C] or [N, C, ...]");
  NCS d{x.size(0), x.size(1), 1};
  for (int i = 2; i < x.ndim(); ++i) d.s *= x.size(i);
  return d;
}

DType stats_dtype(const Tensor& x) { return x.dtype() == DType::f64 ? DType::f64 : DType::f32; }

/// Throws unless t is a per-channel tensor: [C], the statistics dtype, x's device.
void check_channel(const char* op, const char* name, const Tensor& t, const Tensor& x, NCS d,
                   DType dtype) {
  check_defined(op, t, name);
  MGPU_CHECK(t.shape() == Shape({d.c}) && t.dtype() == dtype && t.device() == x.device(), op,
             ": ", name, " is ", t.str(), ", expected ", dtype_name(dtype), "[", d.c, "] on ",
             x.device().str(), " for input ", x.str());
}

/// The checks both backward halves share: grad_out like x, mean and invstd per channel.
NCS check_backward_inputs(const char* op, const Tensor& grad_out, const Tensor& x,
                          const Tensor& mean, const Tensor& invstd) {
  const NCS d = ncs_of(op, x);
  check_same_shape(op, grad_out, x);
  check_same_dtype(op, grad_out, x);
  check_same_device(op, grad_out, x);
  check_channel(op, "mean", mean, x, d, stats_dtype(x));
  check_channel(op, "invstd", invstd, x, d, stats_dtype(x));
  return d;
}

#ifdef MGPU_WITH_CUDA
detail::NCS cuda_ncs(NCS d) { return detail::NCS{d.n, d.c, d.s}; }
#endif

/// Reads element i of a per-channel or per-element tensor as double, whatever its dtype.
template <typename T>
double at(const T* p, std::int64_t i) {
  return static_cast<double>(mgpu::detail::to_compute(p[i]));
}

/// The sum of f(s) over s in [0, count), in double, by 8 running sums (sum j takes s = j,
/// j + 8, ...) added in lane order at the end: a fixed order, so the same bits on every run,
/// and 8 independent additions in flight where one chain of dependent additions would wait
/// for each result in turn (several times slower on a CPU core).
template <typename F>
double lane_sum(std::int64_t count, F f) {
  constexpr std::int64_t kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t s = 0;
  for (; s + kLanes <= count; s += kLanes)
    for (std::int64_t j = 0; j < kLanes; ++j) lane[j] += f(s + j);
  for (; s < count; ++s) lane[s % kLanes] += f(s);
  double total = 0;
  for (std::int64_t j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}

/// Channels per task for a per-channel sum: each channel reads its N*S values.
std::int64_t channel_grain(NCS d) {
  return mgpu::detail::kGrainSize / std::max<std::int64_t>(d.n * d.s, 1) + 1;
}

/// (n, c) planes per task for an elementwise pass: each plane holds S values.
std::int64_t plane_grain(NCS d) { return mgpu::detail::kGrainSize / std::max<std::int64_t>(d.s, 1) + 1; }

/// Calls f(T, A): T the input's storage type, A the statistics' type (float or double).
template <typename F>
void dispatch_bn(DType dtype, const char* op, F&& f) {
  mgpu::detail::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    using A = mgpu::detail::compute_t<T>;
    f(T{}, A{});
  });
}

}  // namespace

BatchNormStats batch_norm_stats(const Tensor& x) {
  const NCS d = ncs_of("batch_norm_stats", x);
  const std::int64_t count = d.n * d.s;
  MGPU_CHECK(count > 0, "batch_norm_stats: input ", x.str(),
             " has no values per channel (an empty batch)");
  BatchNormStats st;
  st.count = count;
  st.mean = Tensor::empty({d.c}, stats_dtype(x), x.device());
  st.var = Tensor::empty({d.c}, stats_dtype(x), x.device());
  if (d.c == 0) return st;  // no channel: nothing to compute (and no CUDA grid to launch)
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::bn_stats_cuda(x, cuda_ncs(d), st.mean, st.var));
    return st;
  }
  dispatch_bn(x.dtype(), "batch_norm_stats", [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    const T* px = x.data<T>();
    mgpu::detail::parallel_for(0, d.c, channel_grain(d), [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        // Plane by plane (n = 0, 1, ...), each plane's S values by lane_sum.
        double sum = 0;
        for (std::int64_t n = 0; n < d.n; ++n) {
          const T* plane = px + (n * d.c + c) * d.s;
          sum += lane_sum(d.s, [=](std::int64_t s) { return at(plane, s); });
        }
        const double mean = sum / static_cast<double>(count);
        double sq = 0;
        for (std::int64_t n = 0; n < d.n; ++n) {
          const T* plane = px + (n * d.c + c) * d.s;
          sq += lane_sum(d.s, [=](std::int64_t s) {
            const double dev = at(plane, s) - mean;
            return dev * dev;
          });
        }
        st.mean.data<A>()[c] = static_cast<A>(mean);
        st.var.data<A>()[c] = static_cast<A>(sq / static_cast<double>(count));
      }
    });
  });
  return st;
}

Tensor batch_norm_invstd(const Tensor& var, double eps) {
  check_defined("batch_norm_invstd", var, "var");
  MGPU_CHECK(var.ndim() == 1 && (var.dtype() == DType::f32 || var.dtype() == DType::f64),
             "batch_norm_invstd: var is ", var.str(), ", expected f32[C] or f64[C]");
  Tensor out = Tensor::empty(var.shape(), var.dtype(), var.device());
  if (out.numel() == 0) return out;
  if (var.device().is_cuda()) {
    MGPU_IF_CUDA(detail::bn_invstd_cuda(var, eps, out));
    return out;
  }
  dispatch_bn(var.dtype(), "batch_norm_invstd", [&](auto, auto ta) {
    using A = decltype(ta);  // var is f32 or f64: its own statistics type
    for (std::int64_t c = 0; c < var.numel(); ++c)
      out.data<A>()[c] = static_cast<A>(1.0 / std::sqrt(at(var.data<A>(), c) + eps));
  });
  return out;
}

Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& weight, const Tensor& bias) {
  const char* op = "batch_norm_apply";
  const NCS d = ncs_of(op, x);
  check_channel(op, "mean", mean, x, d, stats_dtype(x));
  check_channel(op, "invstd", invstd, x, d, stats_dtype(x));
  if (weight.defined()) check_channel(op, "weight", weight, x, d, x.dtype());
  if (bias.defined()) check_channel(op, "bias", bias, x, d, x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::bn_apply_cuda(x, mean, invstd, weight, bias, y, cuda_ncs(d)));
    return y;
  }
  dispatch_bn(x.dtype(), op, [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    mgpu::detail::parallel_for(0, d.n * d.c, plane_grain(d), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {  // plane p = n * C + c
        const std::int64_t c = p % d.c;
        const A m = mean.data<A>()[c], is = invstd.data<A>()[c];
        const A w = weight.defined() ? static_cast<A>(at(weight.data<T>(), c)) : A(1);
        const A b = bias.defined() ? static_cast<A>(at(bias.data<T>(), c)) : A(0);
        for (std::int64_t i = p * d.s; i < (p + 1) * d.s; ++i) {
          const A xhat = (static_cast<A>(at(px, i)) - m) * is;
          py[i] = mgpu::detail::from_compute<T>(xhat * w + b);
        }
      }
    });
  });
  return y;
}

void batch_norm_backward_reduce(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                const Tensor& invstd, Tensor& sum_dy, Tensor& sum_dy_xmu) {
  const char* op = "batch_norm_backward_reduce";
  const NCS d = check_backward_inputs(op, grad_out, x, mean, invstd);
  // Written into: a defined output (a view into a larger buffer included) must be [C] in
  // the statistics dtype on x's device; an undefined one is allocated.
  for (auto [t, name] : {std::pair<Tensor*, const char*>{&sum_dy, "sum_dy"},
                         std::pair<Tensor*, const char*>{&sum_dy_xmu, "sum_dy_xmu"}}) {
    if (t->defined()) {
      check_channel(op, name, *t, x, d, stats_dtype(x));
    } else {
      *t = Tensor::empty({d.c}, stats_dtype(x), x.device());
    }
  }
  if (d.c == 0) return;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::bn_backward_reduce_cuda(grad_out, x, mean, sum_dy, sum_dy_xmu,
                                                 cuda_ncs(d)));
    return;
  }
  dispatch_bn(x.dtype(), op, [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    const T* px = x.data<T>();
    const T* pg = grad_out.data<T>();
    mgpu::detail::parallel_for(0, d.c, channel_grain(d), [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const double m = mean.data<A>()[c];
        double sdy = 0, sdyx = 0;
        for (std::int64_t n = 0; n < d.n; ++n) {  // plane by plane, as in batch_norm_stats
          const T* g_plane = pg + (n * d.c + c) * d.s;
          const T* x_plane = px + (n * d.c + c) * d.s;
          sdy += lane_sum(d.s, [=](std::int64_t s) { return at(g_plane, s); });
          sdyx += lane_sum(d.s, [=](std::int64_t s) { return at(g_plane, s) * (at(x_plane, s) - m); });
        }
        sum_dy.data<A>()[c] = static_cast<A>(sdy);
        sum_dy_xmu.data<A>()[c] = static_cast<A>(sdyx);
      }
    });
  });
}

Tensor batch_norm_backward_apply(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight,
                                 const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                                 std::int64_t count) {
  const char* op = "batch_norm_backward_apply";
  const NCS d = check_backward_inputs(op, grad_out, x, mean, invstd);
  check_channel(op, "sum_dy", sum_dy, x, d, stats_dtype(x));
  check_channel(op, "sum_dy_xmu", sum_dy_xmu, x, d, stats_dtype(x));
  if (weight.defined()) check_channel(op, "weight", weight, x, d, x.dtype());
  MGPU_CHECK(count > 0, op, ": count must be positive, got ", count);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (dx.numel() == 0) return dx;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::bn_backward_apply_cuda(grad_out, x, mean, invstd, weight, sum_dy,
                                                sum_dy_xmu, count, dx, cuda_ncs(d)));
    return dx;
  }
  dispatch_bn(x.dtype(), op, [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    const T* px = x.data<T>();
    const T* pg = grad_out.data<T>();
    T* pdx = dx.data<T>();
    const A inv_count = A(1) / static_cast<A>(count);
    mgpu::detail::parallel_for(0, d.n * d.c, plane_grain(d), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {  // plane p = n * C + c
        const std::int64_t c = p % d.c;
        const A m = mean.data<A>()[c], is = invstd.data<A>()[c];
        const A w = weight.defined() ? static_cast<A>(at(weight.data<T>(), c)) : A(1);
        // The two corrections: the mean of dy, and the part of dy along (x - mean).
        const A mean_dy = sum_dy.data<A>()[c] * inv_count;
        const A proj = sum_dy_xmu.data<A>()[c] * inv_count * is * is;
        for (std::int64_t i = p * d.s; i < (p + 1) * d.s; ++i) {
          const A xmu = static_cast<A>(at(px, i)) - m;
          const A dy = static_cast<A>(at(pg, i));
          pdx[i] = mgpu::detail::from_compute<T>((dy - mean_dy - xmu * proj) * is * w);
        }
      }
    });
  });
  return dx;
}

}  // namespace mgpu::nn
