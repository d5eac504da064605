// BatchNorm1d/2d: batch statistics in training mode, running statistics in eval mode.
#include "mgpu/nn/batchnorm.h"

#include <sstream>

#include "layer_util.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

namespace {
/// t in `dtype` (a no-op when it already is).
Tensor as(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : cast(t, dtype); }
}  // namespace

BatchNorm::BatchNorm(const char* kind, int min_dims, int max_dims, std::int64_t num_features,
                     double eps, double momentum, bool affine)
    : kind_(kind),
      min_dims_(min_dims),
      max_dims_(max_dims),
      features_(num_features),
      eps_(eps),
      momentum_(momentum),
      affine_(affine) {
  MGPU_CHECK(features_ > 0 && eps_ > 0 && momentum_ >= 0 && momentum_ <= 1, kind_, "(",
             features_, ", eps=", eps_, ", momentum=", momentum_,
             "): need num_features > 0, eps > 0, momentum in [0, 1]");
  if (affine_) {
    weight_ = register_parameter("weight", Tensor::full({features_}, 1.0));
    bias_ = register_parameter("bias", Tensor::zeros({features_}));
  }
  register_buffer("running_mean", Tensor::zeros({features_}));
  register_buffer("running_var", Tensor::full({features_}, 1.0));
  register_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64));
}

Parameter& BatchNorm::weight() {
  MGPU_CHECK(affine_, describe(), ": built with affine=false, it has no weight");
  return parameter_at(weight_);
}

Parameter& BatchNorm::bias() {
  MGPU_CHECK(affine_, describe(), ": built with affine=false, it has no bias");
  return parameter_at(bias_);
}

std::string BatchNorm::describe() const {
  std::ostringstream os;
  os << kind_ << "(" << features_ << ", eps=" << eps_ << ", momentum=" << momentum_
     << ", affine=" << (affine_ ? "true" : "false") << ")";
  return os.str();
}

void BatchNorm::check_input(const Tensor& x) const {
  check_defined(kind_, x, "input");
  MGPU_CHECK(x.ndim() >= min_dims_ && x.ndim() <= max_dims_ && x.size(1) == features_,
             describe(), ": input is ", x.str(), ", expected ",
             max_dims_ == 4 ? "[N, C, H, W]" : "[N, C] or [N, C, L]", " with C = ", features_);
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_input(x);
  Tensor& rm = running_mean();
  Tensor& rv = running_var();
  detail::check_like_param(describe(), "input", x, rm);
  const Tensor weight = affine_ ? parameter_at(weight_).value : Tensor();
  const Tensor bias = affine_ ? parameter_at(bias_).value : Tensor();
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;

  if (!is_training()) {
    // Eval: a fixed affine map from the running estimates; nothing kept for backward.
    Tensor invstd = batch_norm_invstd(as(rv, stats), eps_);
    return batch_norm_apply(x, as(rm, stats), invstd, weight, bias);
  }

  BatchNormStats st = batch_norm_stats(x);
  MGPU_CHECK(st.count > 1, describe(), ": Expected more than 1 value per channel when "
             "training, got input ", x.str(), " (1 value per channel; use a larger batch)");
  Tensor invstd = batch_norm_invstd(st.var, eps_);
  // running = (1 - momentum) * running + momentum * batch; the variance is the unbiased
  // one (count / (count - 1) times the batch's), as in PyTorch.
  const double unbias = static_cast<double>(st.count) / static_cast<double>(st.count - 1);
  scale_(rm, 1.0 - momentum_);
  axpy_(rm, momentum_, as(st.mean, rm.dtype()));
  scale_(rv, 1.0 - momentum_);
  axpy_(rv, momentum_ * unbias, as(st.var, rv.dtype()));
  // num_batches_tracked += 1, on whatever device it lives (counting in f64 is exact).
  Tensor& tracked = num_batches_tracked();
  Tensor count = cast(tracked, DType::f64);
  add_(count, Tensor::full({}, 1.0, DType::f64, tracked.device()));
  cast_(tracked, count);

  Tensor y = batch_norm_apply(x, st.mean, invstd, weight, bias);
  saved_.push(describe(), Saved{x, st.mean, invstd, st.count, true});
  return y;
}

Tensor BatchNorm::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  check_same_shape(kind_, grad_out, s.x);
  Tensor sum_dy, sum_dy_xmu;
  batch_norm_backward_reduce(grad_out, s.x, s.mean, s.invstd, sum_dy, sum_dy_xmu);
  Tensor weight;
  if (affine_) {
    Parameter& w = parameter_at(weight_);
    weight = w.value;
    // d(gamma) = sum(dy * xhat) = sum(dy * (x - mean)) * invstd; d(beta) = sum(dy).
    // The bias first, in PyTorch's order (DDP's rebuilt buckets follow it).
    detail::accumulate_grad(parameter_at(bias_), sum_dy);
    detail::accumulate_grad(w, mul(sum_dy_xmu, s.invstd));
  }
  return batch_norm_backward_apply(grad_out, s.x, s.mean, s.invstd, weight, sum_dy, sum_dy_xmu,
                                   s.count);
}

}  // namespace mgpu::nn
