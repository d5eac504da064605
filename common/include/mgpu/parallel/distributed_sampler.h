/// @file distributed_sampler.h
/// @brief DistributedSampler: each rank's share of a dataset (torch.utils.data.DistributedSampler).
///
/// Data parallelism only helps if the ranks see different samples. Every rank builds the
/// same permutation of the dataset (same seed, same epoch) and takes every W-th index of it
/// starting at its rank, so the shares are disjoint and together cover the dataset. Without
/// it, ranks started with the same seed would train on identical batches: W times the
/// compute for the progress of one.
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/data/sampler.h"

namespace mgpu::parallel {

/// Each rank's disjoint share of a dataset, for a DataLoader.
class DistributedSampler : public data::Sampler {
 public:
  /// PyTorch's rules for a dataset of `dataset_size` samples over `num_replicas` ranks:
  ///  - num_samples() = ceil(N / W); with drop_last and N % W != 0: floor(N / W);
  ///  - the (shuffled) index list is padded to W * num_samples() by repeating its head
  ///    (again and again if needed), or, with drop_last, cut to that length;
  ///  - rank r takes positions r, r + W, r + 2W, ...;
  ///  - shuffle uses data::shuffled_indices(N, seed, epoch), the same permutation on every
  ///    rank. A DataLoader passes its epoch to indices(epoch); code that calls indices()
  ///    itself must call set_epoch(e) every epoch, or every epoch repeats the first order.
  DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);

  /// The epoch indices() shuffles for (PyTorch's set_epoch).
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  /// The epoch of the last set_epoch() (0 before).
  std::int64_t epoch() const { return epoch_; }
  /// Samples per rank per epoch (the same on every rank).
  std::int64_t num_samples() const { return num_samples_; }
  /// num_samples() * num_replicas.
  std::int64_t total_size() const { return num_samples_ * num_replicas_; }
  /// This rank's dataset indices for epoch `epoch`, in order (what a DataLoader calls).
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  /// The same for the epoch of the last set_epoch().
  std::vector<std::int64_t> indices() const { return indices(epoch_); }

  std::int64_t dataset_size() const { return dataset_size_; }  ///< N
  int num_replicas() const { return num_replicas_; }             ///< W
  int rank() const { return rank_; }                             ///< this rank
  bool shuffle() const { return shuffle_; }                      ///< shuffled by epoch?
  bool drop_last() const { return drop_last_; }                  ///< cut instead of pad?

 private:
  std::int64_t dataset_size_;
  int num_replicas_, rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::int64_t epoch_ = 0;
  std::int64_t num_samples_ = 0;
};

}  // namespace mgpu::parallel
