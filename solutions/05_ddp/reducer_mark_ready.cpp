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
