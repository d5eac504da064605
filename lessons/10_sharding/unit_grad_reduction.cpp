// Lesson 10, task 3: the gradient reduction of a unit, started by the grad-ready hooks while
// backward goes on (the unit is the bucket) and finished into the master shard's gradient
// (mgpu/parallel/sharding/sharded_unit.h). Everything the methods call is in
// common/src/parallel/sharding/sharded_unit.cpp.
#include "mgpu/ops.h"  // scale_(t, alpha), add_(a, b), cast(t, dtype)
#include "mgpu/parallel/sharding/sharded_unit.h"

namespace mgpu::parallel {

// The hook every parameter of the unit fires the moment its gradient is final.
void ShardedUnit::on_grad_ready() {
  if (!armed_) return;  // a backward the unit did not arm (the model's own, not ours)
  MGPU_CHECK(pending_grads_ > 0, "ShardedDataParallel: unit ", index_, ": more gradients became "
             "ready than it has parameters (did a layer run twice in one forward?)");
  // TODO(task3) BEGIN: count pending_grads_ down; at zero disarm (armed_) and launch the
  // reduction (3 lines).
  MGPU_FAIL("TODO(task3): ShardedUnit::on_grad_ready is not written yet "
            "(lessons/10_sharding/unit_grad_reduction.cpp); called for unit ", index_);
  // TODO(task3) END
}

// Starts the average of full_grad_ over the ranks on the communication thread.
void ShardedUnit::launch_grad_reduction() {
  // TODO(task3) BEGIN: divide full_grad_ by world_ first (DDP's order: the sum of 16-bit
  // gradients stays in range), then stage 1: all-reduce (sum) full_grad_ in place, logged as
  // "all-reduce"; stages 2-3: reduce-scatter (sum) it into a new reduced_ of shard_numel
  // elements in the compute dtype, logged as "reduce-scatter". Keep the Work in
  // reduce_work_ and set reduction_launched_ (about 10 lines).
  MGPU_FAIL("TODO(task3): ShardedUnit::launch_grad_reduction is not written yet "
            "(lessons/10_sharding/unit_grad_reduction.cpp); called for unit ", index_);
  // TODO(task3) END
}

// Waits for the reduction; this rank's averaged chunk joins the master gradient.
void ShardedUnit::finish_grad_reduction() {
  if (!reduction_launched_) return;
  // TODO(task3) BEGIN: wait for reduce_work_; this rank's averaged chunk is own_chunk of
  // full_grad_ (stage 1) or reduced_ (stages 2-3): add it to shard_->grad (fp32: cast a
  // 16-bit chunk first), so gradients accumulate over backwards until zero_grad. Stages
  // 2-3 keep no full gradient: drop full_grad_, reduced_ and every parameter's grad
  // (params_) (about 8 lines).
  MGPU_FAIL("TODO(task3): ShardedUnit::finish_grad_reduction is not written yet "
            "(lessons/10_sharding/unit_grad_reduction.cpp); called for unit ", index_);
  // TODO(task3) END
  reduction_launched_ = false;
}

}  // namespace mgpu::parallel
