// Lesson 06, task 3: SyncBatchNorm's backward: the local sums, one all_reduce, dx.
#include "mgpu/nn/functional.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/sync_bn/sync_batchnorm_steps.h"

namespace mgpu::parallel {

SyncBatchNormGrads sync_batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Tensor& mean, const Tensor& invstd,
                                            const Tensor& weight, std::int64_t count,
                                            dist::ProcessGroup& group) {
  MGPU_CHECK(x.ndim() >= 2 && x.size(1) > 0, "sync_batch_norm_backward: input is ", x.str(),
             ", expected [N, C, ...] with C > 0 (N may be 0)");
  check_same_shape("sync_batch_norm_backward", grad_out, x);
  const std::int64_t C = x.size(1);
  const DType stats = mean.dtype();  // f32, or f64 for f64 input
  SyncBatchNormGrads out;
  // What you have: C, stats (above); cast_(dst, src) copies into a view; group.all_reduce(t,
  // dist::ReduceOp::sum).wait() sums t over the ranks in place; mul(a, b);
  // nn::batch_norm_backward_apply(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count)
  // computes dx from any sums and count; nn::batch_norm_backward_reduce(dy, x, mean, invstd,
  // sum_dy, sum_dy_xmu) writes this rank's sums into its last two arguments ([C] tensors,
  // views into a larger buffer included; undefined ones it allocates); out.grad_bias,
  // out.grad_input, out.grad_weight; Tensor::empty, Tensor::zeros(shape, dtype, device);
  // t.view(offset, {n}) a view into t.
  // TODO(task3) BEGIN: chapter §4's backward: dx (shaped like x) from the WORLD's two sums
  // and count; grad_weight and grad_bias [C] (only when weight is defined) from THIS rank's
  // sums; exactly one all_reduce, of 2C values in the statistics dtype, on every rank, an
  // empty one included (§5: zeros in, zero gradients and an empty dx out). Stuck:
  // tools/hint 06 3 (about 20 lines).
  MGPU_FAIL("TODO(task3): sync_batch_norm_backward is not written yet "
            "(lessons/06_sync_batchnorm/sync_backward.cpp); input ", x.str(), ", dy ",
            grad_out.str(), ", C = ", C, ", ", dtype_name(stats), " mean ", mean.str(),
            " and invstd ", invstd.str(), ", weight ", weight.defined() ? "yes" : "no",
            ", count ", count, ", ", group.size(), " ranks");
  // TODO(task3) END
  return out;
}

}  // namespace mgpu::parallel
