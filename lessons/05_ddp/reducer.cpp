// Lesson 05, tasks 2-4: the three methods of the Reducer (mgpu/parallel/reducer.h) that make
// DDP's algorithm. Everything they call is in common/src/parallel/reducer.cpp.
#include <vector>

#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion; scale_(t, alpha)
#include "mgpu/parallel/reducer.h"

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
            "(lessons/05_ddp/reducer.cpp); called for parameter '", params_[v]->name(), "'");
  // TODO(task2) END
}

// Task 3: the end of the reduction, once the module's backward has returned.
void Reducer::finalize_backward() {
  if (!expect_hooks_) return;  // under no_sync(): nothing to reduce
  // TODO(task3) BEGIN: (1) with options_.find_unused_parameters, mark every parameter that
  // is not ready yet ready; (2) if a bucket was never launched, record_unfinished_reduction()
  // and stop; (3) otherwise wait_bucket() each bucket in order and copy bucket_view(v) back
  // into params_[v]->grad with cast_ (mgpu/ops.h) for every parameter some rank used
  // (sync_used_variables(), a collective, only with find_unused_parameters); a grad that
  // already is its bucket view needs no copy (about 15 lines).
  MGPU_FAIL("TODO(task3): Reducer::finalize_backward is not written yet "
            "(lessons/05_ddp/reducer.cpp)");
  // TODO(task3) END
  expect_hooks_ = false;
}

// Task 4: once, before the second forward, the buckets in the order the gradients arrived.
// DDP's forward asks only while a rebuild can come (not yet rebuilt, find_unused_parameters
// off: the order may change from step to step then), and the order is recorded only then.
bool Reducer::rebuild_buckets() {
  ensure_prior_reduction_finished();
  // Nothing to rebuild from until a synchronized backward recorded every gradient.
  if (grad_ready_order_.size() != params_.size()) return false;
  // TODO(task4) BEGIN: the buckets of compute_bucket_assignment_by_size over the
  // parameters in grad_ready_order_ (grad_spec(v) each; the indices are the variables
  // themselves) with the caps {first_bucket_cap_bytes, bucket_cap_bytes} of options_;
  // then every rank adopts rank 0's (sync_bucket_indices) and initialize_buckets() them
  // (about 6 lines).
  MGPU_FAIL("TODO(task4): Reducer::rebuild_buckets is not written yet "
            "(lessons/05_ddp/reducer.cpp); ", grad_ready_order_.size(), " gradients were recorded");
  // TODO(task4) END
  rebuilt_from_order_ = grad_ready_order_;
  grad_ready_order_.clear();
  has_rebuilt_buckets_ = true;
  return true;
}

}  // namespace mgpu::parallel
