// Lesson 10, task 4: the life of a unit in a step: gather, compute, free, with the next
// unit's all-gather prefetched (mgpu/parallel/sharding/sharded_unit.h). Everything the methods call is
// in common/src/parallel/sharding/sharded_unit.cpp and in your gather.cpp and unit_grad_reduction.cpp.
#include "mgpu/parallel/sharding/sharded_unit.h"

namespace mgpu::parallel {

Tensor ShardedUnit::forward(const Tensor& x) {
  // TODO(task4) BEGIN: (1) if the full parameters are not current (needs_gather()), get
  // them: start the all-gather unless a prefetch started it (state_), then wait; (2) start
  // the all-gather of prefetch_forward_ (if any, and only if it is sharded and idle) so
  // that it runs while this unit computes; (3) run the layers on x in the compute dtype
  // (to_compute, run_forward); (4) stage 3: free the full parameters (about 10 lines).
  if (needs_gather()) {
    if (state_ == UnitState::sharded) start_gather();
    wait_gather();
  }
  if (prefetch_forward_ != nullptr && prefetch_forward_->state() == UnitState::sharded)
    prefetch_forward_->start_gather();
  Tensor y = run_forward(to_compute(x));
  if (stage_ == 3) free_full();
  return y;
  // TODO(task4) END
}

Tensor ShardedUnit::backward(const Tensor& grad_out) {
  // TODO(task4) BEGIN: (1) the full parameters again if they are not current (stage 3
  // freed them), as in forward; (2) prefetch prefetch_backward_ the same way; (3)
  // begin_backward() (a zeroed gradient buffer, hooks armed), run the layers backward on
  // grad_out in the compute dtype, end_backward() (the reduction starts if no hook started
  // it); (4) stage 3: free the full parameters (about 12 lines).
  if (needs_gather()) {
    if (state_ == UnitState::sharded) start_gather();
    wait_gather();
  }
  if (prefetch_backward_ != nullptr && prefetch_backward_->state() == UnitState::sharded)
    prefetch_backward_->start_gather();
  begin_backward();
  Tensor g = run_backward(to_compute(grad_out));
  end_backward();
  if (stage_ == 3) free_full();
  return g;
  // TODO(task4) END
}

}  // namespace mgpu::parallel
