/// @file distributed_sampler.h
/// @brief DistributedSampler: each rank's share of a dataset (torch.utils.data.DistributedSampler).
///
/// Data parallelism only helps if the ranks see different samples. Every rank builds the
/// same permutation of the dataset (same seed, same epoch) and takes every W-th index of it
/// starting at its rank, so the shares are disjoint and together cover the dataset. Without
/// it, ranks started with the same seed would train on identical batches: W times the
/// compute for the progress of one.
///
/// num_samples() and indices() are lesson 05's task 5 (lessons/05_ddp/sampler_indices.cpp;
/// the library compiles in the reference, solutions/05_ddp/sampler_indices.cpp).
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
  ///  - the order is 0..N-1, or with shuffle data::shuffled_indices(N, seed, epoch()), the
  ///    same permutation on every rank;
  ///  - it is padded to W * num_samples() by repeating its head (again and again if
  ///    needed), or, with drop_last, cut to that length;
  ///  - rank r takes positions r, r + W, r + 2W, ...
  /// Example: N = 10, W = 3, no shuffle: rank 0 gets 0 3 6 9, rank 1 gets 1 4 7 0, rank 2
  /// gets 2 5 8 1; with drop_last: 0 3 6 / 1 4 7 / 2 5 8.
  DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);

  /// The epoch the shuffle is drawn for (PyTorch's set_epoch). Call it at the start of
  /// every epoch: the sampler never advances on its own.
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  /// The epoch of the last set_epoch() (0 before).
  std::int64_t epoch() const { return epoch_; }
  /// Samples per rank per epoch, the same on every rank (task 5).
  std::int64_t num_samples() const;
  /// num_samples() * num_replicas: the padded (or cut) length of the order.
  std::int64_t total_size() const { return num_samples() * num_replicas_; }
  /// This rank's dataset indices for epoch(), in order (task 5).
  std::vector<std::int64_t> indices() const;
  /// What a DataLoader calls at the start of each of its epochs. As PyTorch's, this
  /// sampler ignores the loader's count and follows set_epoch() alone, so a program that
  /// forgets set_epoch() visits the same order every epoch.
  std::vector<std::int64_t> indices(std::int64_t loader_epoch) const override;

  std::int64_t dataset_size() const { return dataset_size_; }  ///< N
  int num_replicas() const { return num_replicas_; }             ///< W
  int rank() const { return rank_; }                             ///< this rank
  bool shuffle() const { return shuffle_; }                      ///< shuffled by epoch?
  std::uint64_t seed() const { return seed_; }                   ///< seed of the shuffle
  bool drop_last() const { return drop_last_; }                  ///< cut instead of pad?

 private:
  std::int64_t dataset_size_;
  int num_replicas_, rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::int64_t epoch_ = 0;
};

}  // namespace mgpu::parallel
