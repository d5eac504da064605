// DistributedDataParallel's bucket state for checkpoints: the rebuilt buckets (or the
// recorded ready order) saved and adopted again, so that a resumed run reduces its
// gradients in the same buckets as the uninterrupted one.
#include "mgpu/parallel/ddp/ddp.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mgpu::parallel {

namespace {
Tensor index_tensor(const std::vector<std::int64_t>& v) {
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
}
}  // namespace

io::StateDict DistributedDataParallel::bucket_state_dict() const {
  if (!reducer_->has_rebuilt_buckets()) {
    const auto& order = reducer_->recorded_ready_order();
    if (options_.find_unused_parameters || order.empty() ||
        order.size() != reducer_->variables().size())
      return {};
    return {{"ready_order", index_tensor(std::vector<std::int64_t>(order.begin(), order.end()))}};
  }
  std::vector<std::int64_t> sizes, variables;
  for (const auto& bucket : reducer_->bucket_indices()) {
    sizes.push_back(static_cast<std::int64_t>(bucket.size()));
    for (std::size_t v : bucket) variables.push_back(static_cast<std::int64_t>(v));
  }
  return {{"bucket_sizes", index_tensor(sizes)}, {"bucket_variables", index_tensor(variables)}};
}

void DistributedDataParallel::load_bucket_state_dict(const io::StateDict& state,
                                                     const std::string& where) {
  if (state.empty()) return;
  if (state.size() == 1 && state.count("ready_order")) {
    const auto order = state.at("ready_order").to_vector<std::int64_t>();
    std::vector<std::size_t> indices;
    for (std::int64_t v : order) {
      MGPU_CHECK(v >= 0, where, ": DDP's ready order names variable ", v);
      indices.push_back(static_cast<std::size_t>(v));
    }
    try {
      reducer_->adopt_ready_order(std::move(indices));
    } catch (const Error& e) {
      MGPU_FAIL(where, ": DDP's ready order was saved for another model: ", e.what());
    }
    return;
  }
  MGPU_CHECK(state.count("bucket_sizes") && state.count("bucket_variables") && state.size() == 2,
             where, ": DDP's bucket state needs 'bucket_sizes' and 'bucket_variables', or "
             "'ready_order' alone");
  const auto sizes = state.at("bucket_sizes").to_vector<std::int64_t>();
  const auto variables = state.at("bucket_variables").to_vector<std::int64_t>();
  std::vector<std::vector<std::size_t>> buckets;
  std::size_t next = 0;
  for (std::int64_t size : sizes) {
    MGPU_CHECK(size > 0 && next + static_cast<std::size_t>(size) <= variables.size(), where,
               ": DDP's bucket state does not add up (", sizes.size(), " bucket sizes, ",
               variables.size(), " variables)");
    buckets.emplace_back();
    for (std::int64_t k = 0; k < size; ++k, ++next) {
      MGPU_CHECK(variables[next] >= 0, where, ": DDP's bucket state names variable ",
                 variables[next]);
      buckets.back().push_back(static_cast<std::size_t>(variables[next]));
    }
  }
  MGPU_CHECK(next == variables.size(), where, ": DDP's bucket state does not add up (",
             variables.size() - next, " variables in no bucket)");
  try {
    reducer_->adopt_rebuilt_buckets(std::move(buckets));
  } catch (const Error& e) {
    MGPU_FAIL(where, ": DDP's buckets were saved for another model: ", e.what());
  }
}

}  // namespace mgpu::parallel
