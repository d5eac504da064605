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
  MGPU_FAIL("TODO(task4): ShardedUnit::forward is not written yet "
            "(lessons/10_sharding/unit_cycle.cpp); called for unit ", index_, " on ", x.str());
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
  MGPU_FAIL("TODO(task4): ShardedUnit::backward is not written yet "
            "(lessons/10_sharding/unit_cycle.cpp); called for unit ", index_, " on ", grad_out.str());
  // TODO(task4) END
}

}  // namespace mgpu::parallel
