/// @file rng.h
/// @brief Counter-based random numbers (Philox4x32-10): the same values on every device.
///
/// A counter-based generator computes value i directly from (seed, i): there is no hidden
/// state to advance, so a CPU loop and a CUDA kernel with one thread per element produce
/// the same numbers, and every rank that uses the same seed gets the same values.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MGPU_HOST_DEVICE __host__ __device__
#else
#define MGPU_HOST_DEVICE
#endif

namespace mgpu {

/// Four 32-bit random words for counter `counter` under key `seed` (Philox4x32, 10 rounds;
/// Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
struct Philox4 {
  std::uint32_t v[4];  ///< the four output words, each uniform over [0, 2^32)
};

/// The full generator: a 128-bit counter (c0..c3) under a 64-bit key (k0, k1).
MGPU_HOST_DEVICE inline Philox4 philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                              std::uint32_t c3, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    // One round: two 32x32->64 multiplies mix the counter words with the key.
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<std::uint32_t>(p1);
    c3 = static_cast<std::uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;  // the key schedule: Weyl-sequence constants from the paper
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

/// Block `counter` of stream `seed`: the 64-bit counter fills the low two counter words.
MGPU_HOST_DEVICE inline Philox4 philox4x32(std::uint64_t counter, std::uint64_t seed) {
  return philox4x32_10(static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
                       0u, 0u, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// The i-th 32-bit random word of stream `seed`: word i%4 of block i/4.
MGPU_HOST_DEVICE inline std::uint32_t random_u32(std::uint64_t seed, std::uint64_t i) {
  return philox4x32(i / 4, seed).v[i % 4];
}

/// Uniform in [0, 1) with 24 random bits: exact in float, identical on every device.
MGPU_HOST_DEVICE inline float random_uniform(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(random_u32(seed, i) >> 8) * (1.0f / 16777216.0f);
}

/// Mixes a seed with a stream id so that different purposes (init, dropout, shuffling)
/// of one seed draw independent numbers (splitmix64 finalizer).
MGPU_HOST_DEVICE inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace mgpu
