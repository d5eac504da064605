// SyncBatchNorm: the module. Training with a group of 2+ ranks runs the cross-rank steps
// of sync_batchnorm_steps.cpp; eval mode or a world of one rank is plain BatchNorm.
#include "mgpu/parallel/sync_bn/sync_batchnorm.h"

#include <sstream>

#include "mgpu/dist/runtime.h"
#include "mgpu/nn/functional.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/comm_log.h"  // clock_s
#include "nn/layer_util.h"
#include "running_stats.h"

namespace mgpu::parallel {

using detail::as_dtype;

SyncBatchNorm::SyncBatchNorm(std::int64_t num_features, double eps, std::optional<double> momentum,
                             bool affine, bool track_running_stats,
                             dist::ProcessGroup* process_group)
    : features_(num_features),
      eps_(eps),
      momentum_(momentum),
      affine_(affine),
      track_(track_running_stats),
      group_(process_group) {
  MGPU_CHECK(features_ > 0 && eps_ > 0 && (!momentum_ || (*momentum_ >= 0 && *momentum_ <= 1)),
             describe(), ": need num_features > 0, eps > 0, momentum in [0, 1] or none");
  if (affine_) {
    weight_ = register_parameter("weight", Tensor::full({features_}, 1.0));
    bias_ = register_parameter("bias", Tensor::zeros({features_}));
  }
  // The same buffers, in the same order, as nn::BatchNorm: state dicts match.
  if (track_) {
    register_buffer("running_mean", Tensor::zeros({features_}));
    register_buffer("running_var", Tensor::full({features_}, 1.0));
    register_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64));
  }
}

nn::Parameter& SyncBatchNorm::weight() {
  MGPU_CHECK(affine_, describe(), ": built with affine=false, it has no weight");
  return parameter_at(weight_);
}

nn::Parameter& SyncBatchNorm::bias() {
  MGPU_CHECK(affine_, describe(), ": built with affine=false, it has no bias");
  return parameter_at(bias_);
}

Tensor& SyncBatchNorm::running_mean() {
  MGPU_CHECK(track_, describe(), ": built with track_running_stats=false, no running_mean");
  return buffer_at(0);
}

Tensor& SyncBatchNorm::running_var() {
  MGPU_CHECK(track_, describe(), ": built with track_running_stats=false, no running_var");
  return buffer_at(1);
}

Tensor& SyncBatchNorm::num_batches_tracked() {
  MGPU_CHECK(track_, describe(), ": built with track_running_stats=false, no num_batches_tracked");
  return buffer_at(2);
}

std::string SyncBatchNorm::describe() const {
  std::ostringstream os;
  os << "SyncBatchNorm(" << features_ << ", eps=" << eps_ << ", momentum=";
  if (momentum_) {
    os << *momentum_;
  } else {
    os << "none";
  }
  os << ", affine=" << (affine_ ? "true" : "false")
     << ", track_running_stats=" << (track_ ? "true" : "false") << ")";
  return os.str();
}

dist::ProcessGroup* SyncBatchNorm::sync_group() const {
  if (group_) return group_;
  if (dist::world_size() == 1) return nullptr;
  return &dist::default_group();  // throws, saying to call init_process_group, if none
}

void SyncBatchNorm::check_input(const Tensor& x) {
  check_defined("SyncBatchNorm", x, "input");
  MGPU_CHECK(x.ndim() >= 2 && x.size(1) == features_, describe(), ": input is ", x.str(),
             ", expected [N, C, ...] (at least 2 dimensions) with C = ", features_);
  // The parameters and buffers (when there are any) fix the device and dtype.
  if (affine_) {
    nn::detail::check_like_param(describe(), "input", x, parameter_at(weight_).value);
  } else if (track_) {
    nn::detail::check_like_param(describe(), "input", x, buffer_at(0));
  }
}

double SyncBatchNorm::advance_batch_count() {
  // num_batches_tracked += 1 where it lives (counting in f64 is exact).
  Tensor& tracked = num_batches_tracked();
  Tensor n = cast(tracked, DType::f64);
  add_(n, Tensor::full({}, 1.0, DType::f64, tracked.device()));
  cast_(tracked, n);
  if (momentum_) return *momentum_;
  return 1.0 / n.item();  // a cumulative average: batch k gets weight 1/k
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  check_input(x);
  // The factor of this step in the running statistics, as in PyTorch's _BatchNorm.
  double factor = momentum_.value_or(0.0);
  if (is_training() && track_) factor = advance_batch_count();
  if (is_training()) {
    dist::ProcessGroup* group = sync_group();
    if (group && group->size() > 1) return forward_sync(x, *group, factor);
  }
  // Eval mode uses the running statistics; without them (track_running_stats=false) it
  // normalises with this rank's own batch, unsynchronised, as PyTorch does.
  return forward_local(x, is_training() || !track_, factor);
}

Tensor SyncBatchNorm::forward_local(const Tensor& x, bool batch_stats, double factor) {
  const Tensor weight = affine_ ? parameter_at(weight_).value : Tensor();
  const Tensor bias = affine_ ? parameter_at(bias_).value : Tensor();
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (!batch_stats) {
    Tensor invstd = nn::batch_norm_invstd(as_dtype(running_var(), stats), eps_);
    return nn::batch_norm_apply(x, as_dtype(running_mean(), stats), invstd, weight, bias);
  }
  nn::BatchNormStats st = nn::batch_norm_stats(x);
  MGPU_CHECK(st.count > 1, describe(), ": Expected more than 1 value per channel when "
             "training, got input ", x.str(), " (1 value per channel; use a larger batch)");
  Tensor invstd = nn::batch_norm_invstd(st.var, eps_);
  if (is_training() && track_)
    detail::update_running_stats(running_mean(), running_var(), st.mean, st.var, st.count, factor);
  Tensor y = nn::batch_norm_apply(x, st.mean, invstd, weight, bias);
  if (is_training()) saved_.push(describe(), Saved{x, st.mean, invstd, st.count, nullptr});
  return y;
}

Tensor SyncBatchNorm::forward_sync(const Tensor& x, dist::ProcessGroup& group, double factor) {
  Tensor none_mean, none_var;  // no running statistics to update
  Tensor& rm = track_ ? running_mean() : none_mean;
  Tensor& rv = track_ ? running_var() : none_var;
  // Step 1) every rank's [mean, invstd, count]: one all_gather.
  const double begin_s = observer_ ? clock_s() : 0.0;
  Tensor gathered = gather_stats(x, group);
  if (observer_)
    observer_("stats + all_gather", begin_s, clock_s(),
              static_cast<std::int64_t>(gathered.nbytes()));
  // Step 2) the world's mean and invstd; the running statistics move with them.
  GlobalBatchStats g = merge_stats(gathered, rm, rv, factor);
  // Step 3) normalise, scale and shift this rank's batch with the world's statistics.
  const Tensor weight = affine_ ? parameter_at(weight_).value : Tensor();
  const Tensor bias = affine_ ? parameter_at(bias_).value : Tensor();
  Tensor y = nn::batch_norm_apply(x, g.mean, g.invstd, weight, bias);
  saved_.push(describe(), Saved{x, g.mean, g.invstd, g.count, &group});
  return y;
}

Tensor SyncBatchNorm::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  check_same_shape("SyncBatchNorm", grad_out, s.x);
  const Tensor weight = affine_ ? parameter_at(weight_).value : Tensor();
  SyncBatchNormGrads d;
  if (s.group) {
    const double begin_s = observer_ ? clock_s() : 0.0;
    d = backward_sync(grad_out, s.x, s.mean, s.invstd, weight, s.count, *s.group);
    if (observer_)  // the all_reduce carried [sum_dy | sum_dy_xmu]: 2C values
      observer_("sums + all_reduce + dx", begin_s, clock_s(),
                static_cast<std::int64_t>(2 * s.mean.nbytes()));
  } else {
    // Local: the same formula with this rank's own sums and count.
    Tensor sum_dy, sum_dy_xmu;
    nn::batch_norm_backward_reduce(grad_out, s.x, s.mean, s.invstd, sum_dy, sum_dy_xmu);
    d.grad_input = nn::batch_norm_backward_apply(grad_out, s.x, s.mean, s.invstd, weight, sum_dy,
                                                 sum_dy_xmu, s.count);
    if (affine_) {
      d.grad_weight = mul(sum_dy_xmu, s.invstd);
      d.grad_bias = sum_dy;
    }
  }
  if (affine_) {
    // d(gamma) = sum(dy * xhat), d(beta) = sum(dy): this rank's own sums (DDP averages them).
    nn::detail::accumulate_grad(parameter_at(bias_), d.grad_bias);  // PyTorch's order
    nn::detail::accumulate_grad(parameter_at(weight_), d.grad_weight);
  }
  return d.grad_input;
}

Tensor SyncBatchNorm::gather_stats(const Tensor& x, dist::ProcessGroup& group) {
  return gather_batch_stats(x, eps_, group);
}

GlobalBatchStats SyncBatchNorm::merge_stats(const Tensor& gathered, Tensor& running_mean,
                                            Tensor& running_var, double momentum) {
  return batch_norm_gather_stats_with_counts(gathered, running_mean, running_var, momentum, eps_);
}

SyncBatchNormGrads SyncBatchNorm::backward_sync(const Tensor& grad_out, const Tensor& x,
                                                const Tensor& mean, const Tensor& invstd,
                                                const Tensor& weight, std::int64_t count,
                                                dist::ProcessGroup& group) {
  return sync_batch_norm_backward(grad_out, x, mean, invstd, weight, count, group);
}

}  // namespace mgpu::parallel
