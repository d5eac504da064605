// SyncBatchNorm's cross-rank steps: gather the ranks' statistics, merge them, and the
// backward's one all_reduce. The per-channel kernels are nn's batch-norm kernels and the
// merge in sync_batchnorm_kernels.{cpp,cu}.
#include "mgpu/parallel/sync_batchnorm_steps.h"

#include "mgpu/nn/functional.h"
#include "mgpu/ops.h"
#include "running_stats.h"

namespace mgpu::parallel {

namespace {

DType stats_dtype(const Tensor& x) { return x.dtype() == DType::f64 ? DType::f64 : DType::f32; }

void check_batch(const char* op, const Tensor& x) {
  check_defined(op, x, "input");
  MGPU_CHECK(x.ndim() >= 2 && x.size(1) > 0, op, ": input is ", x.str(),
             ", expected [N, C, ...] with C > 0 (N may be 0 on some ranks)");
}

}  // namespace

Tensor gather_batch_stats(const Tensor& x, double eps, dist::ProcessGroup& group) {
  check_batch("gather_batch_stats", x);
  const std::int64_t C = x.size(1);
  // Step 1) this rank's row [mean | invstd | count]; zeros (count 0) for an empty batch.
  Tensor row = Tensor::zeros({2 * C + 1}, stats_dtype(x), x.device());
  if (x.numel() > 0) {
    nn::BatchNormStats st = nn::batch_norm_stats(x);
    Tensor mean = row.view(0, {C}), invstd = row.view(C, {C}), count = row.view(2 * C, {1});
    cast_(mean, st.mean);
    cast_(invstd, nn::batch_norm_invstd(st.var, eps));
    fill_(count, static_cast<double>(st.count));
  }
  // Step 2) one all_gather: row r of the result is rank r's. An all_reduce cannot do this:
  // the counts differ between ranks, and the merge needs each rank's count with its stats.
  Tensor all = Tensor::empty({group.size(), 2 * C + 1}, row.dtype(), x.device());
  group.all_gather(all, row).wait();
  return all;
}

GlobalBatchStats batch_norm_gather_stats_with_counts(const Tensor& gathered, Tensor& running_mean,
                                                     Tensor& running_var, double momentum,
                                                     double eps) {
  GlobalBatchStats g;
  Tensor var;
  merge_batch_stats(gathered, eps, g.mean, var, g.invstd, g.count);
  // Every rank holds the same rows, so every rank throws here alike: no rank is left waiting.
  MGPU_CHECK(g.count > 0, "SyncBatchNorm: every rank's batch is empty; at least one rank "
             "needs samples in a training forward");
  MGPU_CHECK(g.count > 1, "SyncBatchNorm: the world's batch has 1 value per channel; "
             "training needs more than 1 (a larger batch, or more ranks with samples)");
  detail::update_running_stats(running_mean, running_var, g.mean, var, g.count, momentum);
  return g;
}

SyncBatchNormGrads sync_batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Tensor& mean, const Tensor& invstd,
                                            const Tensor& weight, std::int64_t count,
                                            dist::ProcessGroup& group) {
  const char* op = "sync_batch_norm_backward";
  check_batch(op, x);
  check_same_shape(op, grad_out, x);
  MGPU_CHECK(count > 0, op, ": count must be the world's count (> 0), got ", count);
  const std::int64_t C = x.size(1);
  SyncBatchNormGrads out;
  // Step 1) this rank's sums, packed into one buffer so that one collective carries both.
  Tensor sums = Tensor::zeros({2 * C}, stats_dtype(x), x.device());
  Tensor sum_dy = sums.view(0, {C}), sum_dy_xmu = sums.view(C, {C});
  if (x.numel() > 0) {
    Tensor local_dy, local_dy_xmu;
    nn::batch_norm_backward_reduce(grad_out, x, mean, invstd, local_dy, local_dy_xmu);
    cast_(sum_dy, local_dy);
    cast_(sum_dy_xmu, local_dy_xmu);
    // Step 2) grad_weight and grad_bias from this rank's sums, before the all_reduce: DDP
    // averages them over the ranks like every other gradient.
    if (weight.defined()) {
      out.grad_weight = mul(local_dy_xmu, invstd);
      out.grad_bias = local_dy;
    }
  } else if (weight.defined()) {
    out.grad_weight = Tensor::zeros({C}, sums.dtype(), x.device());
    out.grad_bias = Tensor::zeros({C}, sums.dtype(), x.device());
  }
  // Step 3) the world's sums (an empty rank contributes zeros but must still take part).
  group.all_reduce(sums, dist::ReduceOp::sum).wait();
  // Step 4) dx with the world's sums and count.
  if (x.numel() == 0) {
    out.grad_input = Tensor::empty(x.shape(), x.dtype(), x.device());
  } else {
    out.grad_input = nn::batch_norm_backward_apply(grad_out, x, mean, invstd, weight, sum_dy,
                                                   sum_dy_xmu, count);
  }
  return out;
}

}  // namespace mgpu::parallel
