// Lesson 05, task 4: the Reducer's bucket rebuild (mgpu/parallel/ddp/reducer.h).
// Everything it calls is in common/src/parallel/ddp/reducer.cpp.
#include <vector>

#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion; scale_(t, alpha)
#include "mgpu/parallel/ddp/reducer.h"

namespace mgpu::parallel {

// Task 4: once, before the second forward, the buckets in the order the gradients arrived.
// DDP's forward asks only while a rebuild can come (not yet rebuilt, find_unused_parameters
// off: the order may change from step to step then), and the order is recorded only then.
bool Reducer::rebuild_buckets() {
  ensure_prior_reduction_finished();
  // Nothing to rebuild from until a synchronized backward recorded every gradient.
  if (grad_ready_order_.size() != params_.size()) return false;
  // What you have: compute_bucket_assignment_by_size (your task 1); grad_ready_order_ (the
  // variables in the order their gradients became ready); grad_spec(v) -> GradSpec;
  // initialize_buckets(b) (makes b the buckets in use); options_.bucket_cap_bytes,
  // options_.first_bucket_cap_bytes; sync_bucket_indices(b) (every rank's b <- rank 0's, a
  // collective).
  // TODO(task4) BEGIN: chapter §4, step 3: the buckets regrouped by §3's rules over the
  // variables in gradient-ready order with the caps {first, rest}, each bucket listing
  // variable indices, the same buckets on every rank (rank 0's, whatever order a rank saw),
  // and in use from the next backward. Stuck: tools/hint 05 4 (about 6 lines).
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
