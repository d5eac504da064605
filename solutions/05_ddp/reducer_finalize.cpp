// Lesson 05, task 3: the Reducer's end of backward (mgpu/parallel/ddp/reducer.h).
// Everything it calls is in common/src/parallel/ddp/reducer.cpp.
#include <vector>

#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion; scale_(t, alpha)
#include "mgpu/parallel/ddp/reducer.h"

namespace mgpu::parallel {

// Task 3: the end of the reduction, once the module's backward has returned.
void Reducer::finalize_backward() {
  if (!expect_hooks_) return;  // under no_sync(): nothing to reduce
  // What you have: members buckets_ (each with its .variables), next_bucket_,
  // options_.find_unused_parameters, params_[v]->grad, variable_ready_; methods
  // bucket_view(v), mark_variable_ready(v) (task 2), record_unfinished_reduction(),
  // sync_used_variables() (per variable: did any rank use it? a collective), wait_bucket(b);
  // cast_(dst, src), t.shares_storage(u).
  // TODO(task3) BEGIN: the end of the reduction (chapter §2, §6, §8; §11, task 3). Afterwards
  // every parameter some rank used holds in its grad the average over the ranks; with
  // find_unused_parameters, one that no rank used keeps its grad untouched; without it, a
  // bucket that never launched (a gradient never came) leaves the reduction unfinished, for
  // the next forward to report. Every rank issues the same collectives in the same order; a
  // grad that already is its bucket's view is not copied. Stuck: tools/hint 05 3 (about 15
  // lines).
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
