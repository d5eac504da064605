// Random inputs for tests: tensors from a fixed seed (the library's generator), and tensors
// and labels drawn from Catch's --rng-seed, so that `--rng-seed time` draws fresh inputs
// while a plain run is reproducible. Every rank of a multi-rank test draws the same values.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "mgpu/ops.h"
#include "mgpu/tensor.h"

namespace mgpu::testing {

/// Uniform values in [lo, hi) from `seed` with the library's generator (CPU).
inline Tensor uniform_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64,
                             double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  uniform_(t, seed, lo, hi);
  return t;
}

/// Uniform values in [-1, 1), seeded from Catch's --rng-seed and `salt`; `stream` picks
/// another sequence for the same salt.
inline Tensor random_tensor(const Shape& shape, unsigned salt, DType dtype = DType::f64,
                            const Device& device = Device::cpu(), unsigned stream = 0) {
  std::mt19937 gen(Catch::rngSeed() * 7919u + salt * 104729u + stream);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape, device).to(dtype);
}

/// `n` class labels in [0, classes) (i64), seeded from Catch's --rng-seed and `salt`.
inline Tensor random_labels(std::int64_t n, std::int64_t classes, unsigned salt,
                            const Device& device = Device::cpu()) {
  std::mt19937 gen(Catch::rngSeed() * 31u + salt);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::int64_t>(gen() % static_cast<unsigned>(classes));
  return Tensor::from_vector(v, {n}, device);
}

}  // namespace mgpu::testing
