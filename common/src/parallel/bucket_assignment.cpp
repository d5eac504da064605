// Bucket assignment: the reference of lesson 05's task 1.
#include "mgpu/parallel/bucket_assignment.h"

#include <algorithm>
#include <map>

#include "mgpu/error.h"

namespace mgpu::parallel {

std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(
    const std::vector<GradSpec>& tensors, const std::vector<std::size_t>& size_limits) {
  MGPU_CHECK(!size_limits.empty(),
             "compute_bucket_assignment_by_size: size_limits is empty (pass at least one cap, "
             "e.g. {1 MiB, 25 MiB})");
  struct Open {
    std::vector<std::size_t> indices;
    std::size_t bytes = 0;
    std::size_t limit_index = 0;  // which cap this dtype's open bucket uses
  };
  std::map<DType, Open> open;  // one open bucket per dtype
  // (walk position of the first tensor, indices): sorted by the first at the end.
  std::vector<std::pair<std::size_t, std::vector<std::size_t>>> closed;
  std::map<DType, std::size_t> first_position;

  auto close = [&](DType dt, Open& b) {
    closed.emplace_back(first_position[dt], std::move(b.indices));
    b.indices.clear();
    b.bytes = 0;
    b.limit_index = std::min(b.limit_index + 1, size_limits.size() - 1);
  };
  for (std::size_t step = 0; step < tensors.size(); ++step) {
    const std::size_t i = tensors.size() - 1 - step;  // last registered first
    Open& b = open[tensors[i].dtype];
    if (b.indices.empty()) first_position[tensors[i].dtype] = step;
    b.indices.push_back(i);
    b.bytes += tensors[i].nbytes;
    if (b.bytes >= size_limits[b.limit_index]) close(tensors[i].dtype, b);
  }
  for (auto& [dt, b] : open)
    if (!b.indices.empty()) close(dt, b);
  std::sort(closed.begin(), closed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<std::size_t>> result;
  for (auto& c : closed) result.push_back(std::move(c.second));
  return result;
}

std::vector<std::size_t> bucket_size_limits(std::size_t first_bucket_cap_bytes,
                                            std::size_t bucket_cap_bytes) {
  return {first_bucket_cap_bytes, bucket_cap_bytes};
}

}  // namespace mgpu::parallel
