// Deterministic shuffling.
#include "mgpu/data/sampler.h"

#include <numeric>
#include <utility>

#include "mgpu/error.h"
#include "mgpu/rng.h"

namespace mgpu::data {

std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  MGPU_CHECK(n >= 0, "shuffled_indices: n = ", n, " is negative");
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  const std::uint64_t key = mix_seed(seed + static_cast<std::uint64_t>(epoch), /*stream=*/7);
  // Fisher-Yates: position i swaps with a uniform j in [0, i]. j = (r * (i + 1)) >> 32 maps
  // a 32-bit random r onto [0, i] without a division (bias below 2^-32 * n: negligible).
  std::uint64_t draw = 0;
  for (std::int64_t i = n - 1; i > 0; --i) {
    const std::uint64_t r = random_u32(key, draw++);
    const auto j = static_cast<std::int64_t>((r * static_cast<std::uint64_t>(i + 1)) >> 32);
    std::swap(idx[static_cast<std::size_t>(i)], idx[static_cast<std::size_t>(j)]);
  }
  return idx;
}

std::vector<std::int64_t> RandomSampler::indices(std::int64_t epoch) const {
  if (shuffle_) return shuffled_indices(n_, seed_, epoch);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n_));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  return idx;
}

}  // namespace mgpu::data
