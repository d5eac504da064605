// Shared by lesson 00's graded tests: random inputs and f64 references.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "basics.h"
#include "mgpu/tensor.h"

namespace lesson00_test {

/// Sizes every CPU test runs: empty, one element, odd, around a block / a tile, ragged.
inline const std::vector<std::int64_t> kSmallSizes = {0, 1, 7, 255, 256, 257, 511, 512, 513, 1000, 5 * 512 + 3};

/// Uniform floats in [-1, 1). Seeded from Catch's --rng-seed, so `--rng-seed time` draws
/// fresh inputs while a plain run is reproducible.
inline std::vector<float> random_floats(std::int64_t n, unsigned salt) {
  std::mt19937 gen(Catch::rngSeed() * 7919u + salt * 104729u + static_cast<unsigned>(n));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& f : v) f = dist(gen);
  return v;
}

inline mgpu::Tensor tensor_of(const std::vector<float>& v, const mgpu::Device& d = mgpu::Device::cpu()) {
  return mgpu::Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}, d);
}

}  // namespace lesson00_test
