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
  struct Open {
    std::vector<std::size_t> indices;
    std::size_t bytes = 0;
    std::size_t first_step = 0;   // walk position of the bucket's first tensor
    std::size_t limit_index = 0;  // which entry of size_limits caps this dtype's bucket
  };
  std::map<DType, Open> open;
  std::vector<std::pair<std::size_t, std::vector<std::size_t>>> closed;  // (first_step, indices)
  auto close = [&](Open& b) {
    closed.emplace_back(b.first_step, std::move(b.indices));
    b.indices.clear();
    b.bytes = 0;
    b.limit_index = std::min(b.limit_index + 1, size_limits.size() - 1);
  };
  for (std::size_t step = 0; step < tensors.size(); ++step) {
    const std::size_t i = tensors.size() - 1 - step;  // the last registered first
    Open& b = open[tensors[i].dtype];
    if (b.indices.empty()) b.first_step = step;
    b.indices.push_back(i);
    b.bytes += tensors[i].nbytes;
    if (b.bytes >= size_limits[b.limit_index]) close(b);
  }
  for (auto& entry : open)
    if (!entry.second.indices.empty()) close(entry.second);
  std::sort(closed.begin(), closed.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::vector<std::size_t>> buckets;
  for (auto& c : closed) buckets.push_back(std::move(c.second));
  return buckets;
  // TODO(task1) END
}

}  // namespace mgpu::lesson05
