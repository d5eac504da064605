// DistributedSampler: the argument checks and what a DataLoader calls. num_samples() and
// indices() are lesson 05's task 5 (lessons/05_ddp/sampler_indices.cpp).
#include "mgpu/parallel/ddp/distributed_sampler.h"

#include "mgpu/error.h"

namespace mgpu::parallel {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, std::uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle),
      seed_(seed), drop_last_(drop_last) {
  MGPU_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size = ", dataset_size,
             "; give the number of samples (>= 0)");
  MGPU_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas = ", num_replicas,
             " (pass the world size, dist::world_size())");
  MGPU_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
             " is outside [0, ", num_replicas, ")");
}

std::vector<std::int64_t> DistributedSampler::indices(std::int64_t /*loader_epoch*/) const {
  return indices();  // set_epoch() decides, not the loader (see the header)
}

}  // namespace mgpu::parallel
