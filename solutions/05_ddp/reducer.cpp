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

// Task 3: the end of the reduction, once the module's backward has returned.
void Reducer::finalize_backward() {
  if (!expect_hooks_) return;  // under no_sync(): nothing to reduce
  // TODO(task3) BEGIN: (1) with options_.find_unused_parameters, mark every parameter that
  // is not ready yet ready; (2) if a bucket was never launched, record_unfinished_reduction()
  // and stop; (3) otherwise wait_bucket() each bucket in order and copy bucket_view(v) back
  // into params_[v]->grad with cast_ (mgpu/ops.h) for every parameter some rank used
  // (sync_used_variables(), a collective, only with find_unused_parameters); a grad that
  // already is its bucket view needs no copy (about 15 lines).
  if (options_.find_unused_parameters) {
    for (std::size_t v = 0; v < params_.size(); ++v)
      if (!variable_ready_[v]) mark_variable_ready(v);
  }
  if (next_bucket_ < buckets_.size()) {
    record_unfinished_reduction();  // the next forward names the parameters that got no gradient
  } else {
    const std::vector<char> used = options_.find_unused_parameters
                                       ? sync_used_variables()
                                       : std::vector<char>(params_.size(), 1);
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      wait_bucket(b);
      for (std::size_t v : buckets_[b].variables) {
        if (!used[v]) continue;  // no rank used it: leave its gradient untouched
        const Tensor averaged = bucket_view(v);
        Tensor& grad = params_[v]->grad;
        if (!grad.shares_storage(averaged)) cast_(grad, averaged);
      }
    }
  }
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
  std::vector<GradSpec> specs;
  for (std::size_t v : grad_ready_order_) specs.push_back(grad_spec(v));
  std::vector<std::vector<std::size_t>> buckets = compute_bucket_assignment_by_size(
      specs, {options_.first_bucket_cap_bytes, options_.bucket_cap_bytes}, grad_ready_order_);
  // Ranks may have seen different orders (threads, timing): all take rank 0's buckets.
  sync_bucket_indices(buckets);
  initialize_buckets(std::move(buckets));
  // TODO(task4) END
  rebuilt_from_order_ = grad_ready_order_;
  grad_ready_order_.clear();
  has_rebuilt_buckets_ = true;
  return true;
}

}  // namespace mgpu::parallel
