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
  MGPU_FAIL("TODO(task4): ShardedUnit::forward is not written yet "
            "(lessons/10_sharding/unit_cycle.cpp); called for unit ", index_, " on ", x.str());
  // TODO(task4) END
}

Tensor ShardedUnit::backward(const Tensor& grad_out) {
  // TODO(task4) BEGIN: (1) the full parameters again if they are not current (stage 3
  // freed them), as in forward; (2) prefetch prefetch_backward_ the same way; (3)
  // begin_backward() (a zeroed gradient buffer, hooks armed), run the layers backward on
  // grad_out in the compute dtype, end_backward() (the reduction starts if no hook started
  // it); (4) stage 3: free the full parameters (about 12 lines).
  MGPU_FAIL("TODO(task4): ShardedUnit::backward is not written yet "
            "(lessons/10_sharding/unit_cycle.cpp); called for unit ", index_, " on ", grad_out.str());
  // TODO(task4) END
}

}  // namespace mgpu::parallel
