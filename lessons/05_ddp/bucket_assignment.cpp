// Lesson 05, task 1: which gradients share a bucket.
#include <algorithm>
#include <map>
#include <utility>

#include "ddp_lesson.h"
#include "mgpu/error.h"

namespace mgpu::lesson05 {

std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(
    const std::vector<GradSpec>& tensors, const std::vector<std::size_t>& size_limits) {
  MGPU_CHECK(!size_limits.empty(), "compute_bucket_assignment_by_size: size_limits is empty");
  // TODO(task1) BEGIN: walk the tensors from last to first into one open bucket per dtype,
  // close a bucket when its bytes reach its cap, then order the buckets (about 30 lines).
  MGPU_FAIL("TODO(task1): compute_bucket_assignment_by_size is not written yet "
            "(lessons/05_ddp/bucket_assignment.cpp); called with ", tensors.size(), " tensors");
  // TODO(task1) END
}

}  // namespace mgpu::lesson05
