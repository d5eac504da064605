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
  // What you have: drop_last_; n (N), w (W).
  // TODO(task5) BEGIN: the samples per rank of chapter §9, the same on every rank, with and
  // without drop_last (N = 10, W = 3: 4, or 3 with drop_last). Stuck: tools/hint 05 5
  // (1 line).
  MGPU_FAIL("TODO(task5): DistributedSampler::num_samples is not written yet "
            "(lessons/05_ddp/sampler_indices.cpp); N = ", n, ", W = ", w);
  // TODO(task5) END
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const std::int64_t n = dataset_size_, w = num_replicas_;
  if (n == 0) return {};
  // What you have: data::shuffled_indices(n, seed, epoch); epoch_, rank_, seed_, shuffle_;
  // std::iota; total_size() (num_samples() * W).
  // TODO(task5) BEGIN: this rank's share for epoch_ by chapter §9's rules (its example is
  // the test): one order, the same on every rank, made exactly total_size() long; the W
  // shares are disjoint positions of it. Returns num_samples() dataset indices. Stuck:
  // tools/hint 05 5 (about 15 lines).
  MGPU_FAIL("TODO(task5): DistributedSampler::indices is not written yet "
            "(lessons/05_ddp/sampler_indices.cpp); N = ", n, ", W = ", w, ", epoch ", epoch_);
  // TODO(task5) END
}

}  // namespace mgpu::parallel
