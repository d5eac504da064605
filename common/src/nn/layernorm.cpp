// LayerNorm: the functional forward and backward (CPU loops here, CUDA in layernorm.cu)
// and the module.
#include "mgpu/nn/layernorm.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "dispatch.h"
#include "layer_util.h"
#include "mgpu/ops.h"
#include "parallel_for.h"
#ifdef MGPU_WITH_CUDA
#include "nn/transformer_kernels_cuda.h"
#endif

namespace mgpu::nn {
namespace {

DType stats_dtype(const Tensor& x) { return x.dtype() == DType::f64 ? DType::f64 : DType::f32; }

/// Rows of C values each: the normalized dimension is the last one.
std::int64_t rows_of(const Tensor& x) { return x.numel() / x.size(x.ndim() - 1); }

void check_vector(const char* what, const Tensor& v, const Tensor& x, std::int64_t C) {
  if (!v.defined()) return;
  MGPU_CHECK(v.ndim() == 1 && v.size(0) == C && v.dtype() == x.dtype() &&
                 v.device() == x.device(),
             "layer_norm: ", what, " is ", v.str(), " but the input is ", x.str(), "; it must be [",
             C, "] (the last dimension) in the input's dtype and on its device");
}

// Rows are independent: a row per iteration, several rows per thread.
constexpr std::int64_t kRowsGrain = 64;

template <typename T, typename S>
void layer_norm_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                    Tensor& y, Tensor& mean, Tensor& rstd, std::int64_t rows, std::int64_t C) {
  using mgpu::detail::to_compute;
  const T* px = x.data<T>();
  const T* pw = weight.defined() ? weight.data<T>() : nullptr;
  const T* pb = bias.defined() ? bias.data<T>() : nullptr;
  T* py = y.data<T>();
  S* pm = mean.data<S>();
  S* pr = rstd.data<S>();
  mgpu::detail::parallel_for(0, rows, kRowsGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const T* xr = px + r * C;
      // Two passes in double: the mean, then the squared deviations from it (no
      // cancellation, as E[x²] − E[x]² would have).
      double sum = 0;
      for (std::int64_t c = 0; c < C; ++c) sum += to_compute(xr[c]);
      const double mu = sum / static_cast<double>(C);
      double sq = 0;
      for (std::int64_t c = 0; c < C; ++c) {
        const double d = to_compute(xr[c]) - mu;
        sq += d * d;
      }
      const double rs = 1.0 / std::sqrt(sq / static_cast<double>(C) + eps);
      pm[r] = static_cast<S>(mu);
      pr[r] = static_cast<S>(rs);
      T* yr = py + r * C;
      for (std::int64_t c = 0; c < C; ++c) {
        double v = (to_compute(xr[c]) - mu) * rs;
        if (pw) v *= to_compute(pw[c]);
        if (pb) v += to_compute(pb[c]);
        yr[c] = mgpu::detail::from_compute<T>(static_cast<mgpu::detail::compute_t<T>>(v));
      }
    }
  });
}

template <typename T, typename S>
void layer_norm_backward_cpu(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& weight, Tensor& grad_in,
                             Tensor& grad_weight, Tensor& grad_bias, std::int64_t rows,
                             std::int64_t C) {
  using mgpu::detail::to_compute;
  const T* pg = grad_out.data<T>();
  const T* px = x.data<T>();
  const T* pw = weight.defined() ? weight.data<T>() : nullptr;
  const S* pm = mean.data<S>();
  const S* pr = rstd.data<S>();
  if (grad_in.defined()) {
    T* pdx = grad_in.data<T>();
    mgpu::detail::parallel_for(0, rows, kRowsGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const T* gr = pg + r * C;
        const T* xr = px + r * C;
        const double mu = pm[r], rs = pr[r];
        // mean_c(g) and mean_c(g · x̂), with g = dy · weight.
        double sum_g = 0, sum_gx = 0;
        for (std::int64_t c = 0; c < C; ++c) {
          const double g = to_compute(gr[c]) * (pw ? to_compute(pw[c]) : 1.0);
          sum_g += g;
          sum_gx += g * (to_compute(xr[c]) - mu) * rs;
        }
        const double mean_g = sum_g / static_cast<double>(C);
        const double mean_gx = sum_gx / static_cast<double>(C);
        T* dr = pdx + r * C;
        for (std::int64_t c = 0; c < C; ++c) {
          const double g = to_compute(gr[c]) * (pw ? to_compute(pw[c]) : 1.0);
          const double xhat = (to_compute(xr[c]) - mu) * rs;
          dr[c] = mgpu::detail::from_compute<T>(
              static_cast<mgpu::detail::compute_t<T>>(rs * (g - mean_g - xhat * mean_gx)));
        }
      }
    });
  }
  if (grad_weight.defined() || grad_bias.defined()) {
    // Column sums over the rows, each column on its own and in row order: the thread count
    // never changes a bit.
    S* pdw = grad_weight.defined() ? grad_weight.data<S>() : nullptr;
    S* pdb = grad_bias.defined() ? grad_bias.data<S>() : nullptr;
    mgpu::detail::parallel_for(0, C, kRowsGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) {
        double dw = 0, db = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          const double g = to_compute(pg[r * C + c]);
          dw += g * (to_compute(px[r * C + c]) - static_cast<double>(pm[r])) *
                static_cast<double>(pr[r]);
          db += g;
        }
        if (pdw) pdw[c] = static_cast<S>(dw);
        if (pdb) pdb[c] = static_cast<S>(db);
      }
    });
  }
}

/// Calls f(T{}, S{}) with T the input's type and S the statistics type.
template <typename F>
void dispatch_with_stats(DType dtype, const char* op, F&& f) {
  mgpu::detail::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) f(T{}, double{});
    else f(T{}, float{});
  });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  LayerNormStats* stats) {
  check_defined("layer_norm", x, "input");
  MGPU_CHECK(x.ndim() >= 1 && x.size(x.ndim() - 1) >= 1, "layer_norm: input is ", x.str(),
             "; it needs a last dimension of at least one value to normalize over");
  MGPU_CHECK(eps >= 0 && std::isfinite(eps), "layer_norm: eps = ", eps,
             " must be finite and not negative");
  const std::int64_t C = x.size(x.ndim() - 1), rows = rows_of(x);
  check_vector("weight", weight, x, C);
  check_vector("bias", bias, x, C);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, stats_dtype(x), x.device());
  Tensor rstd = Tensor::empty({rows}, stats_dtype(x), x.device());
  if (rows > 0) {
    if (x.device().is_cuda()) {
      MGPU_IF_CUDA(detail::layer_norm_cuda(x, weight, bias, eps, y, mean, rstd, rows, C));
    } else {
      dispatch_with_stats(x.dtype(), "layer_norm", [&](auto t, auto s) {
        layer_norm_cpu<decltype(t), decltype(s)>(x, weight, bias, eps, y, mean, rstd, rows, C);
      });
    }
  }
  if (stats) *stats = {mean, rstd};
  return y;
}

LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                   const LayerNormStats& stats, const Tensor& weight,
                                   bool input_grad, bool weight_grads) {
  check_defined("layer_norm_backward", grad_out, "grad_out");
  check_defined("layer_norm_backward", x, "input");
  check_same_shape("layer_norm_backward", grad_out, x);
  check_same_dtype("layer_norm_backward", grad_out, x);
  const std::int64_t C = x.size(x.ndim() - 1), rows = rows_of(x);
  check_vector("weight", weight, x, C);
  MGPU_CHECK(stats.mean.defined() && stats.rstd.defined() && stats.mean.numel() == rows &&
                 stats.rstd.numel() == rows && stats.mean.dtype() == stats_dtype(x),
             "layer_norm_backward: the statistics do not belong to this input (", rows,
             " rows expected); pass the LayerNormStats of the forward of this x");
  LayerNormGrads out;
  if (input_grad) out.grad_input = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (weight_grads) {
    out.grad_weight = Tensor::zeros({C}, stats_dtype(x), x.device());
    out.grad_bias = Tensor::zeros({C}, stats_dtype(x), x.device());
  }
  if (rows == 0 || (!input_grad && !weight_grads)) return out;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::layer_norm_backward_cuda(grad_out, x, stats.mean, stats.rstd, weight,
                                                  out.grad_input, out.grad_weight,
                                                  out.grad_bias, rows, C));
  } else {
    dispatch_with_stats(x.dtype(), "layer_norm_backward", [&](auto t, auto s) {
      layer_norm_backward_cpu<decltype(t), decltype(s)>(grad_out, x, stats.mean, stats.rstd, weight,
                                                        out.grad_input, out.grad_weight,
                                                        out.grad_bias, rows, C);
    });
  }
  return out;
}

// ---- the module ------------------------------------------------------------------------------

LayerNorm::LayerNorm(std::int64_t normalized_size, double eps, bool bias)
    : size_(normalized_size), eps_(eps), has_bias_(bias) {
  MGPU_CHECK(size_ > 0 && eps_ >= 0, "LayerNorm(", size_, ", eps=", eps_,
             "): need a normalized size > 0 and eps >= 0");
  weight_ = register_parameter("weight", Tensor::full({size_}, 1.0));
  if (has_bias_) bias_ = register_parameter("bias", Tensor::zeros({size_}));
}

Parameter& LayerNorm::bias() {
  MGPU_CHECK(has_bias_, describe(), ": built with bias=false, it has no bias");
  return parameter_at(bias_);
}

std::string LayerNorm::describe() const {
  std::ostringstream os;
  os << "LayerNorm((" << size_ << ",), eps=" << eps_ << ", bias=" << (has_bias_ ? "true" : "false")
     << ")";
  return os.str();
}

Tensor LayerNorm::forward(const Tensor& x) {
  const Tensor& w = weight().value;
  detail::check_like_param(describe(), "input", x, w);
  MGPU_CHECK(x.ndim() >= 1 && x.size(x.ndim() - 1) == size_, describe(), ": input is ", x.str(),
             ", expected [..., ", size_, "] (the last dimension is the one normalized)");
  LayerNormStats stats;
  Tensor y = layer_norm(x, w, has_bias_ ? bias().value : Tensor(), eps_,
                        is_training() ? &stats : nullptr);
  if (is_training()) saved_.push(describe(), Saved{x, stats});
  return y;
}

Tensor LayerNorm::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  Parameter& w = weight();
  const bool weight_grads = w.requires_grad() || (has_bias_ && bias().requires_grad());
  LayerNormGrads g = layer_norm_backward(grad_out, s.x, s.stats, w.value, input_requires_grad(),
                                         weight_grads);
  if (weight_grads) {
    // The bias before the weight: the order PyTorch's DDP sees for a Linear layer (its
    // LayerNorm makes both ready in one step, so either order matches it).
    if (has_bias_) detail::accumulate_grad(bias(), g.grad_bias);
    detail::accumulate_grad(w, g.grad_weight);
  }
  return g.grad_input;
}

}  // namespace mgpu::nn
