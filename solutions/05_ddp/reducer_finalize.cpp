// Lesson 05, task 3: the Reducer's end of backward (mgpu/parallel/ddp/reducer.h).
// Everything it calls is in common/src/parallel/ddp/reducer.cpp.
#include <vector>

#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion; scale_(t, alpha)
#include "mgpu/parallel/ddp/reducer.h"

namespace mgpu::parallel {

// Task 3: the end of the reduction, once the module's backward has returned.
void Reducer::finalize_backward() {
  if (!expect_hooks_) return;  // under no_sync(): nothing to reduce
  // What you have: options_.find_unused_parameters; variable_ready_; mark_variable_ready(v);
  // buckets_ (each with its .variables), next_bucket_; record_unfinished_reduction();
  // sync_used_variables() (per variable: did any rank use it? a collective); wait_bucket(b);
  // bucket_view(v); params_[v]->grad; t.shares_storage(u); cast_(dst, src).
  // TODO(task3) BEGIN: the end of the reduction (chapter §2, step 4; §6; §8). Afterwards
  // every parameter some rank used holds the average over the ranks in its grad, and one
  // that no rank used keeps its grad; if a bucket never launched (a gradient never came,
  // without find_unused_parameters) the reduction is left unfinished for the next forward
  // to report. Every rank issues the same collectives (about 15 lines).
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

}  // namespace mgpu::parallel
