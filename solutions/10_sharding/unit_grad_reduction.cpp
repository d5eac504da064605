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
  // What you have: armed_; launch_grad_reduction(); pending_grads_ (gradients of the unit
  // not final yet).
  // TODO(task3) BEGIN: lesson 05's hook with the unit as the bucket: the reduction is
  // launched exactly once, when the unit's last gradient becomes final, and the hooks are
  // disarmed from then on. Stuck: tools/hint 10 3 (3 lines).
  if (--pending_grads_ == 0) {
    armed_ = false;
    launch_grad_reduction();
  }
  // TODO(task3) END
}

// Starts the average of full_grad_ over the ranks on the communication thread.
void ShardedUnit::launch_grad_reduction() {
  // What you have: members: compute_dtype_, full_grad_ [U] (compute dtype),
  // layout_.shard_numel, reduce_work_, reduced_, reduction_launched_, stage_, world_.
  // Functions: group_.all_reduce(t, dist::ReduceOp) (in place), group_.reduce_scatter(out,
  // in, dist::ReduceOp) (out: this rank's [S] chunk of the result), each -> dist::Work;
  // log(op, buffer, work); scale_(t, alpha); Tensor::empty(shape, dtype, device).
  // TODO(task3) BEGIN: START chapter §4's reduction of the unit's gradient and return
  // without waiting: stage 1 all-reduces full_grad_ in place, stages 2-3 reduce-scatter it
  // into a new reduced_ [S] in the compute dtype. What arrives is the AVERAGE over the
  // ranks, each rank's share divided by N before the sum (as DDP does: a sum of 16-bit
  // gradients stays in range). Logged as "all-reduce" or "reduce-scatter";
  // reduction_launched_ says it is in flight. Stuck: tools/hint 10 3 (about 10 lines).
  scale_(full_grad_, 1.0 / world_);
  if (stage_ == 1) {
    reduce_work_ = group_.all_reduce(full_grad_, dist::ReduceOp::sum);
    log("all-reduce", full_grad_, reduce_work_);
  } else {
    reduced_ = Tensor::empty({layout_.shard_numel}, compute_dtype_, full_grad_.device());
    reduce_work_ = group_.reduce_scatter(reduced_, full_grad_, dist::ReduceOp::sum);
    log("reduce-scatter", full_grad_, reduce_work_);
  }
  reduction_launched_ = true;
  // TODO(task3) END
}

// Waits for the reduction; this rank's averaged chunk joins the master gradient.
void ShardedUnit::finish_grad_reduction() {
  if (!reduction_launched_) return;
  // What you have: members: full_grad_, params_ (each parameter's grad), reduce_work_ (a
  // dist::Work: wait()), reduced_, shard_->grad (fp32 [S]), stage_. Functions: add_(t, u);
  // cast(t, dtype); own_chunk(t).
  // TODO(task3) BEGIN: afterwards the reduction is complete and this rank's averaged chunk
  // (full_grad_'s at stage 1, reduced_ at stages 2-3) has been ADDED to shard_->grad in
  // fp32, so gradients accumulate over backwards until zero_grad. Stage 1 keeps
  // param.grad, the averaged full gradient; stages 2-3 keep no full gradient: not
  // full_grad_, not reduced_, no parameter's grad. Stuck: tools/hint 10 3 (about 8 lines).
  reduce_work_.wait();
  const Tensor mine = stage_ == 1 ? own_chunk(full_grad_) : reduced_;
  add_(shard_->grad, mine.dtype() == shard_->grad.dtype() ? mine : cast(mine, shard_->grad.dtype()));
  if (stage_ >= 2) {
    full_grad_ = Tensor();
    reduced_ = Tensor();
    for (nn::Parameter* p : params_) p->grad = Tensor();
  }
  // TODO(task3) END
  reduction_launched_ = false;
}

}  // namespace mgpu::parallel
