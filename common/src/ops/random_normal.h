// Private: one standard normal sample per counter, shared verbatim by the CPU loop and
// the CUDA kernel so that both draw from the same random words.
#pragma once

#include <cmath>
#include <cstdint>

#include "mgpu/rng.h"

namespace mgpu::detail {

/// Box-Muller on two 32-bit Philox words. Sample c uses words 2c and 2c+1 of the stream
/// `seed` (half of Philox block c/2), so one block yields two samples and no word is
/// shared between samples. u1 is in (0, 1] (never 0, so the log is finite), u2 in [0, 1).
/// Computed in double; the tails are cut at sqrt(-2 ln 2^-32) ~ 6.7 standard deviations.
MGPU_HOST_DEVICE inline double standard_normal(std::uint64_t seed, std::uint64_t c) {
  const Philox4 block = philox4x32(c / 2, seed);
  const unsigned first = 2 * static_cast<unsigned>(c % 2);  // word (2c) % 4 of the block
  const double inv_2_32 = 1.0 / 4294967296.0;
  const double u1 = (static_cast<double>(block.v[first]) + 1.0) * inv_2_32;
  const double u2 = static_cast<double>(block.v[first + 1]) * inv_2_32;
  const double two_pi = 6.283185307179586476925286766559;
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(two_pi * u2);
}

}  // namespace mgpu::detail
