// Lesson 10, task 4: the life of a unit in a step: gather, compute, free, with the next
// unit's all-gather prefetched (mgpu/parallel/sharding/sharded_unit.h). Everything the methods call is
// in common/src/parallel/sharding/sharded_unit.cpp and in your gather.cpp and unit_grad_reduction.cpp.
#include "mgpu/parallel/sharding/sharded_unit.h"

namespace mgpu::parallel {

Tensor ShardedUnit::forward(const Tensor& x) {
  // What you have: members: prefetch_forward_ (the next unit, or null: state(),
  // start_gather()), stage_ (1, 2 or 3), state_ (UnitState). Functions: free_full(),
  // start_gather(), wait_gather() (your task 2); needs_gather(); run_forward(x) (the
  // layers, in order); to_compute(x).
  // TODO(task4) BEGIN: chapter §4's forward of a unit, with §7's prefetch: the layers run
  // on current full parameters and on x in the compute dtype; no all-gather is started
  // twice (a prefetch may have started this unit's); the next unit's all-gather, if that
  // unit is sharded and idle, runs while this unit computes; at stage 3 only the shard
  // remains afterwards. Every rank takes the same decisions, so the collectives pair up.
  // Returns the layers' output. Stuck: tools/hint 10 4 (about 10 lines).
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
  // What you have: the same as forward's, with prefetch_backward_ (the unit before, or
  // null); begin_backward() (a zeroed gradient buffer, the hooks armed); end_backward()
  // (launches the reduction if no hook did); run_backward(g) (the layers, in reverse order).
  // TODO(task4) BEGIN: chapter §4's backward of a unit: forward's guarantees, with the unit
  // before it prefetched; the layers' gradients land in a fresh, armed gradient buffer, and
  // the unit's reduction is launched by the time it returns. Returns the gradient for the
  // unit's input. Stuck: tools/hint 10 4 (about 12 lines).
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
