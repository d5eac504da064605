// Lesson 10, task 4: the life of a unit in a step: gather, compute, free, with the next
// unit's all-gather prefetched (mgpu/parallel/sharding/sharded_unit.h). Everything the methods call is
// in common/src/parallel/sharding/sharded_unit.cpp and in your gather.cpp and unit_grad_reduction.cpp.
#include "mgpu/parallel/sharding/sharded_unit.h"

namespace mgpu::parallel {

Tensor ShardedUnit::forward(const Tensor& x) {
  // What you have: needs_gather(); state_ (UnitState); start_gather(), wait_gather(),
  // free_full() (your task 2); prefetch_forward_ (a ShardedUnit, or null) with its state()
  // and start_gather(); to_compute(x); run_forward(x); stage_.
  // TODO(task4) BEGIN: chapter §4's forward of a unit, with §7's prefetch: the layers run
  // on current full parameters and on x in the compute dtype; no all-gather is started
  // twice (a prefetch may have started this unit's); the next unit's all-gather, if it is
  // sharded and idle, runs while this unit computes; at stage 3 only the shard remains
  // afterwards. Returns the layers' output (about 10 lines).
  MGPU_FAIL("TODO(task4): ShardedUnit::forward is not written yet "
            "(lessons/10_sharding/unit_cycle.cpp); called for unit ", index_, " on ", x.str());
  // TODO(task4) END
}

Tensor ShardedUnit::backward(const Tensor& grad_out) {
  // What you have: the same as forward's, with prefetch_backward_; begin_backward() (a
  // zeroed gradient buffer, the hooks armed); run_backward(g); end_backward() (launches the
  // reduction if no hook did).
  // TODO(task4) BEGIN: chapter §4's backward of a unit: forward's guarantees, with the unit
  // before it prefetched; the layers' gradients land in a fresh, armed gradient buffer, and
  // the unit's reduction is launched by the time it returns. Returns the gradient for the
  // unit's input (about 12 lines).
  MGPU_FAIL("TODO(task4): ShardedUnit::backward is not written yet "
            "(lessons/10_sharding/unit_cycle.cpp); called for unit ", index_, " on ", grad_out.str());
  // TODO(task4) END
}

}  // namespace mgpu::parallel
