// Lesson 05, task 2: the Reducer's grad-ready hook (mgpu/parallel/ddp/reducer.h).
// Everything it calls is in common/src/parallel/ddp/reducer.cpp.
#include <vector>

#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion; scale_(t, alpha)
#include "mgpu/parallel/ddp/reducer.h"

namespace mgpu::parallel {

// Task 2: the grad-ready hook of variable v (the Reducer calls it once per backward, the
// moment v's gradient is final, while the hooks are armed).
void Reducer::mark_variable_ready(std::size_t v) {
  // TODO(task2) BEGIN: mark v ready and put its gradient into bucket_view(v), divided by
  // world_size_ unless a comm hook is registered (has_comm_hook()); with
  // gradient_as_bucket_view the grad already is that view. Count its bucket down; when it
  // is complete, launch_bucket() every complete bucket from next_bucket_ on, in index
  // order, never skipping one (about 12 lines).
  MGPU_FAIL("TODO(task2): Reducer::mark_variable_ready is not written yet "
            "(lessons/05_ddp/reducer_mark_ready.cpp); called for parameter '", params_[v]->name(), "'");
  // TODO(task2) END
}

}  // namespace mgpu::parallel
