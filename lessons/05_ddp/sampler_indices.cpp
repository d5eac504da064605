// Lesson 05, task 5: DistributedSampler, each rank's share of a dataset
// (mgpu/parallel/ddp/distributed_sampler.h; the constructor is in common/src/parallel/).
#include <numeric>
#include <vector>

#include "mgpu/data/sampler.h"  // data::shuffled_indices(n, seed, epoch)
#include "mgpu/error.h"
#include "mgpu/parallel/ddp/distributed_sampler.h"

namespace mgpu::parallel {

std::int64_t DistributedSampler::num_samples() const {
  const std::int64_t n = dataset_size_, w = num_replicas_;
  // TODO(task5) BEGIN: ceil(N / W), or floor(N / W) with drop_last when W does not divide N
  // (1 line).
  MGPU_FAIL("TODO(task5): DistributedSampler::num_samples is not written yet "
            "(lessons/05_ddp/sampler_indices.cpp); N = ", n, ", W = ", w);
  // TODO(task5) END
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const std::int64_t n = dataset_size_, w = num_replicas_;
  if (n == 0) return {};
  // TODO(task5) BEGIN: the same order on every rank (shuffled for epoch_, or 0..n-1), made
  // exactly total_size() long (padded with its own head, or cut), then this rank's every
  // w-th entry (about 15 lines).
  MGPU_FAIL("TODO(task5): DistributedSampler::indices is not written yet "
            "(lessons/05_ddp/sampler_indices.cpp); N = ", n, ", W = ", w, ", epoch ", epoch_);
  // TODO(task5) END
}

}  // namespace mgpu::parallel
