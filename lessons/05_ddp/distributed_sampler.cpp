// Lesson 05, task 4: DistributedSampler, each rank's share of a dataset.
#include <numeric>

#include "ddp_lesson.h"
#include "mgpu/error.h"

namespace mgpu::lesson05 {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, std::uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle),
      seed_(seed), drop_last_(drop_last) {
  MGPU_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size = ", dataset_size);
  MGPU_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas = ", num_replicas,
             " (pass the world size)");
  MGPU_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
             " is outside [0, ", num_replicas, ")");
}

std::int64_t DistributedSampler::num_samples() const {
  const std::int64_t n = dataset_size_, w = num_replicas_;
  // TODO(task4) BEGIN: ceil(N / W), or floor(N / W) with drop_last when W does not divide N
  // (1 line).
  MGPU_FAIL("TODO(task4): DistributedSampler::num_samples is not written yet "
            "(lessons/05_ddp/distributed_sampler.cpp); N = ", n, ", W = ", w);
  // TODO(task4) END
}

std::vector<std::int64_t> DistributedSampler::indices(std::int64_t epoch) const {
  const std::int64_t n = dataset_size_, w = num_replicas_;
  // TODO(task4) BEGIN: the order (shuffled by data::shuffled_indices(n, seed_, epoch) or
  // 0..n-1), padded with its head or cut to w * num_samples(), then every w-th entry from
  // rank_ (about 15 lines).
  MGPU_FAIL("TODO(task4): DistributedSampler::indices is not written yet "
            "(lessons/05_ddp/distributed_sampler.cpp); N = ", n, ", W = ", w, ", epoch ", epoch);
  // TODO(task4) END
}

}  // namespace mgpu::lesson05
