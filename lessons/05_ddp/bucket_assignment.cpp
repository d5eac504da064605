// Lesson 05, task 1: which gradients share a bucket (mgpu/parallel/ddp/bucket_assignment.h).
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "mgpu/error.h"
#include "mgpu/parallel/ddp/bucket_assignment.h"

namespace mgpu::parallel {

std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(
    const std::vector<GradSpec>& tensors, const std::vector<std::size_t>& size_limits,
    const std::vector<std::size_t>& tensor_indices) {
  MGPU_CHECK(!size_limits.empty(), "compute_bucket_assignment_by_size: size_limits is empty "
             "(pass at least one cap, e.g. {1 MiB, 25 MiB})");
  MGPU_CHECK(tensor_indices.empty() || tensor_indices.size() == tensors.size(),
             "compute_bucket_assignment_by_size: ", tensors.size(), " tensors but ",
             tensor_indices.size(), " tensor_indices (give one index per tensor, or none)");
  std::vector<std::vector<std::size_t>> buckets;
  // What you have: buckets, the result (each bucket a list of indices); DType compares with
  // ==; size_limits (caps in bytes); std::stable_sort, std::vector; tensor_indices (empty, or
  // one index per tensor); tensors[i].dtype and tensors[i].nbytes (GradSpec).
  // TODO(task1) BEGIN: the buckets of chapter §3's rules (bucket_assignment.h states them
  // with the worked example), each a list of indices: tensor_indices[i] for tensor i when
  // given, else i. Invariants: every tensor in exactly one bucket, no bucket mixes dtypes,
  // each dtype's k-th bucket is capped by size_limits[k] (the last cap repeating) and closes
  // the moment its bytes reach its cap, and the buckets come in the order §3 gives for each
  // form of the call. Stuck: tools/hint 05 1 (about 30 lines).
  MGPU_FAIL("TODO(task1): compute_bucket_assignment_by_size is not written yet "
            "(lessons/05_ddp/bucket_assignment.cpp); called with ", tensors.size(), " tensors");
  // TODO(task1) END
  return buckets;
}

}  // namespace mgpu::parallel
