/// @file sampler.h
/// @brief The order in which a DataLoader visits a dataset.
#pragma once

#include <cstdint>
#include <vector>

namespace mgpu::data {

/// A permutation of 0..n-1 that depends only on (seed, epoch): Fisher-Yates driven by the
/// counter-based RNG, so every process and platform gets the same order. As in PyTorch's
/// samplers, the generator of epoch e is seeded with seed + e.
std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

/// Picks the indices of one epoch. DistributedSampler (lesson 05) is one of these.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices to visit, in order, when a DataLoader starts its epoch `epoch` (the
  /// loader's own count). RandomSampler reshuffles by it, as PyTorch's draws a new order
  /// each epoch; DistributedSampler ignores it and follows its set_epoch(), as PyTorch's does.
  virtual std::vector<std::int64_t> indices(std::int64_t epoch) const = 0;
};

/// 0..n-1 in order, or shuffled by (seed, epoch).
class RandomSampler : public Sampler {
 public:
  /// Indices 0..n-1; shuffled per epoch by `seed` when `shuffle`.
  RandomSampler(std::int64_t n, bool shuffle, std::uint64_t seed)
      : n_(n), shuffle_(shuffle), seed_(seed) {}
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;

 private:
  std::int64_t n_;
  bool shuffle_;
  std::uint64_t seed_;
};

}  // namespace mgpu::data
