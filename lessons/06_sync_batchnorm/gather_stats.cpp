// Lesson 06, task 1: this rank's batch statistics, exchanged with one all_gather.
#include "mgpu/nn/functional.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/sync_bn/sync_batchnorm_steps.h"

namespace mgpu::parallel {

Tensor gather_batch_stats(const Tensor& x, double eps, dist::ProcessGroup& group) {
  MGPU_CHECK(x.ndim() >= 2 && x.size(1) > 0, "gather_batch_stats: input is ", x.str(),
             ", expected [N, C, ...] with C > 0 (N may be 0)");
  const std::int64_t C = x.size(1);
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  // What you have: C, stats (the statistics dtype) (above); cast_(dst, src) copies into a
  // view; fill_(t, v); group.all_gather(out, in) -> Work (out has size() * in.numel()
  // elements, rank 0's first), .wait() blocks until it is done; nn::batch_norm_invstd(var,
  // eps) -> 1/sqrt(var + eps); nn::batch_norm_stats(x) -> {mean [C], var [C] (biased),
  // count = N*S} (it refuses an empty x); Tensor::empty, Tensor::zeros(shape, dtype,
  // device); t.view(offset, {n}) a view into t.
  // TODO(task1) BEGIN: chapter §2's first exchange (§9, task 1): returns a [W, 2C+1] tensor
  // in the dtype `stats`, on x's device, the same on every rank, whose row r is rank r's
  // [mean | invstd | count] (all zeros for an empty batch, §5). Exactly one all_gather on
  // every rank, an empty one included. Stuck: tools/hint 06 1 (about 12 lines).
  MGPU_FAIL("TODO(task1): gather_batch_stats is not written yet "
            "(lessons/06_sync_batchnorm/gather_stats.cpp); input ", x.str(), ", C = ", C,
            ", ", dtype_name(stats), " statistics, eps ", eps, ", ", group.size(), " ranks");
  // TODO(task1) END
}

}  // namespace mgpu::parallel
