// Lesson 05, tasks 2 and 3: the grad-ready hook with in-order bucket launch, and the end of
// the reduction. The rest of the Reducer (buckets, views, comm hooks) is the library's:
// mgpu/parallel/reducer.h.
#include "ddp_lesson.h"
#include "mgpu/ops.h"

namespace mgpu::lesson05 {

void Reducer::mark_variable_ready(std::size_t v) {
  if (!expect_hooks_) return;  // under no_sync(): gradients only accumulate in param.grad
  MGPU_CHECK(!variable_ready_[v], "DistributedDataParallel: parameter '", params_[v]->name(),
             "' became ready twice in one backward (its module ran twice in forward?)");
  // TODO(task2) BEGIN: mark v ready; copy its gradient divided by world_size_ into
  // bucket_view(v); count its bucket down; when the bucket is complete, launch every
  // complete bucket from next_bucket_ on, in index order (about 10 lines).
  MGPU_FAIL("TODO(task2): Reducer::mark_variable_ready is not written yet "
            "(lessons/05_ddp/reducer.cpp); called for parameter '", params_[v]->name(), "'");
  // TODO(task2) END
}

void Reducer::finalize_backward() {
  if (!expect_hooks_) return;  // under no_sync(): nothing to reduce
  // TODO(task3) BEGIN: (1) with options_.find_unused_parameters, mark every parameter that is
  // not ready yet ready; (2) if some bucket was never launched, record_unfinished_reduction();
  // (3) otherwise wait for each bucket in order and copy bucket_view(v) back into the grad of
  // each of its parameters that some rank used (sync_used_variables()) (about 15 lines).
  MGPU_FAIL("TODO(task3): Reducer::finalize_backward is not written yet "
            "(lessons/05_ddp/reducer.cpp)");
  // TODO(task3) END
  expect_hooks_ = false;
}

namespace {

// Your pieces, plugged into the library's DDP.
parallel::DDPOptions with_lesson_pieces(parallel::DDPOptions options) {
  options.assign_buckets = compute_bucket_assignment_by_size;
  options.make_reducer = [](std::vector<nn::Parameter*> params,
                            std::vector<std::vector<std::size_t>> buckets,
                            dist::ProcessGroup& group, parallel::ReducerOptions ro) {
    return std::unique_ptr<parallel::Reducer>(
        new Reducer(std::move(params), std::move(buckets), group, ro));
  };
  return options;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 dist::ProcessGroup& group,
                                                 parallel::DDPOptions options)
    : parallel::DistributedDataParallel(std::move(module), group,
                                        with_lesson_pieces(std::move(options))) {}

}  // namespace mgpu::lesson05
