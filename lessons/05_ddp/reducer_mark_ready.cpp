// Lesson 05, task 2: the Reducer's grad-ready hook (mgpu/parallel/ddp/reducer.h).
// Everything it calls is in common/src/parallel/ddp/reducer.cpp.
#include <vector>

#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion; scale_(t, alpha)
#include "mgpu/parallel/ddp/reducer.h"

namespace mgpu::parallel {

// Task 2: the grad-ready hook of variable v (the Reducer calls it once per backward, the
// moment v's gradient is final, while the hooks are armed).
void Reducer::mark_variable_ready(std::size_t v) {
  // What you have: variable_ready_[v]; params_[v]->grad; bucket_view(v) (v's slot in its
  // bucket, a view shaped like the gradient); t.shares_storage(u); cast_(dst, src),
  // scale_(t, alpha); world_size_; has_comm_hook(); locators_[v].bucket; buckets_[b].pending
  // (gradients of bucket b not final yet); buckets_.size(); next_bucket_; launch_bucket(b).
  // TODO(task2) BEGIN: the hook of chapter §2, step 2: afterwards v is ready and its slot
  // holds its gradient divided by the world size (undivided when a comm hook takes over,
  // §7; with gradient_as_bucket_view the gradient already is the slot, §8). Invariant of
  // §5: buckets launch strictly in index order, each exactly once, as soon as it and every
  // bucket before it are complete (about 12 lines).
  MGPU_FAIL("TODO(task2): Reducer::mark_variable_ready is not written yet "
            "(lessons/05_ddp/reducer_mark_ready.cpp); called for parameter '", params_[v]->name(), "'");
  // TODO(task2) END
}

}  // namespace mgpu::parallel
