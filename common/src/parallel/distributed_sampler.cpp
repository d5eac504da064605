// DistributedSampler: the reference of lesson 05's task 4.
#include "mgpu/parallel/distributed_sampler.h"

#include <numeric>

#include "mgpu/error.h"

namespace mgpu::parallel {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, std::uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle),
      seed_(seed), drop_last_(drop_last) {
  MGPU_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size = ", dataset_size);
  MGPU_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas = ", num_replicas,
             " (use the world size, dist::world_size())");
  MGPU_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
             " is outside [0, ", num_replicas, ")");
  const std::int64_t n = dataset_size, w = num_replicas;
  num_samples_ = (drop_last && n % w != 0) ? n / w : (n + w - 1) / w;
}

std::vector<std::int64_t> DistributedSampler::indices(std::int64_t epoch) const {
  const std::int64_t n = dataset_size_, w = num_replicas_, total = total_size();
  // Step 1) the same order on every rank.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  if (shuffle_) {
    order = data::shuffled_indices(n, seed_, epoch);
  } else {
    std::iota(order.begin(), order.end(), std::int64_t{0});
  }
  // Step 2) exactly total_size entries: cut, or pad by repeating the head.
  if (n == 0) return {};
  if (total <= n) {
    order.resize(static_cast<std::size_t>(total));
  } else {
    for (std::int64_t i = n; i < total; ++i) order.push_back(order[static_cast<std::size_t>(i % n)]);
  }
  // Step 3) this rank's positions: rank, rank + W, ...
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::int64_t i = rank_; i < total; i += w) mine.push_back(order[static_cast<std::size_t>(i)]);
  return mine;
}

}  // namespace mgpu::parallel
