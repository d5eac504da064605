// Lesson 05, task 2: the Reducer's grad-ready hook (mgpu/parallel/ddp/reducer.h).
// Everything it calls is in common/src/parallel/ddp/reducer.cpp.
#include <vector>

#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion; scale_(t, alpha)
#include "mgpu/parallel/ddp/reducer.h"

namespace mgpu::parallel {

// Task 2: the grad-ready hook of variable v (the Reducer calls it once per backward, the
// moment v's gradient is final, while the hooks are armed).
void Reducer::mark_variable_ready(std::size_t v) {
  // What you have: members buckets_ (buckets_[b].pending: gradients of bucket b not final
  // yet), locators_[v].bucket, next_bucket_, params_[v]->grad, variable_ready_[v],
  // world_size_; methods bucket_view(v) (v's slot in its bucket, a view shaped like the
  // gradient), has_comm_hook(), launch_bucket(b); cast_(dst, src), scale_(t, alpha),
  // t.shares_storage(u).
  // TODO(task2) BEGIN: the grad-ready hook of chapter §2 (§11, task 2): afterwards v is ready,
  // its slot holds its gradient divided by the world size (undivided when a comm hook takes
  // over, §7; with gradient_as_bucket_view the gradient already is the slot: no copy, §8),
  // and its bucket waits for one gradient fewer. Invariant of §5: buckets launch strictly in
  // index order, each exactly once, as soon as it and every bucket before it are complete,
  // never past an incomplete one. Stuck: tools/hint 05 2 (about 12 lines).
  MGPU_FAIL("TODO(task2): Reducer::mark_variable_ready is not written yet "
            "(lessons/05_ddp/reducer_mark_ready.cpp); called for parameter '", params_[v]->name(), "'");
  // TODO(task2) END
}

}  // namespace mgpu::parallel
