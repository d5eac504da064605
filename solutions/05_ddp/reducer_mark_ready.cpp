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
  variable_ready_[v] = 1;
  // Step 1) the gradient into its slot of the bucket. Without a hook, divided on the way,
  // so that the all-reduce's sum of the slots is the average over ranks.
  Tensor slot = bucket_view(v);
  const Tensor& grad = params_[v]->grad;
  if (!grad.shares_storage(slot)) cast_(slot, grad);  // gradient_as_bucket_view: already there
  if (!has_comm_hook()) scale_(slot, 1.0 / world_size_);
  // Step 2) one gradient fewer to wait for...
  Bucket& bucket = buckets_[locators_[v].bucket];
  if (--bucket.pending > 0) return;
  // Step 3) ...and launch in index order only: every rank must issue the same all-reduces
  // in the same order, whatever order its gradients arrived in.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    launch_bucket(next_bucket_++);
  }
  // TODO(task2) END
}

}  // namespace mgpu::parallel
