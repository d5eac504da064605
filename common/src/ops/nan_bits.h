// Private: the bits of a NaN after cast, as the CPU cast gives them, worked out from the
// source's bits. Shared by the CUDA cast (which uses them so that both backends agree bit for
// bit on NaNs too) and the tests (which check them against the CPU).
//
// Why: the CPU cast (convert.h) widens to double and narrows again with the hardware's
// conversions, which keep a NaN's sign and the top of its payload and set the quiet bit
// (x86-64 SSE and AArch64 alike); then float_to_half and float_to_bf16 keep the sign. The
// GPU's conversions instead return the canonical NaN (0x7fff..., positive, no payload). The
// two are equal as values (any NaN is a NaN) but not as bits, and checkpoints compare bits.
// These rules hold for quiet NaNs, the only ones arithmetic produces. A signaling NaN comes
// out quieted here; the CPU quiets it too except where the compiler folds its float ->
// double -> float round trip away (GCC does, for casts to f32), so there the two backends
// agree on the sign and on NaN-ness but not on the quiet bit.
#pragma once

#include <cstdint>

#include "saturate.h"  // MGPU_OPS_HD

namespace mgpu::detail {

/// A NaN widened to double, from the bits of each floating source type. float -> double
/// moves the 23-bit payload to the top of the 52-bit one and sets the quiet bit; a double
/// stays as it is (the CPU's widen is the identity there).
MGPU_OPS_HD inline std::uint64_t nan_wide_from_f32(std::uint32_t f) {
  return (static_cast<std::uint64_t>(f & 0x80000000u) << 32) | 0x7FF0000000000000ull |
         (static_cast<std::uint64_t>(f & 0x007FFFFFu) << 29) | 0x0008000000000000ull;
}
MGPU_OPS_HD inline std::uint64_t nan_wide_from_f64(std::uint64_t d) { return d; }
/// half -> float (half_to_float: payload moved up, no quieting), then float -> double.
MGPU_OPS_HD inline std::uint64_t nan_wide_from_f16(std::uint16_t h) {
  const std::uint32_t f = (static_cast<std::uint32_t>(h & 0x8000u) << 16) | 0x7F800000u |
                          (static_cast<std::uint32_t>(h & 0x03FFu) << 13);
  return nan_wide_from_f32(f);
}
/// bf16 -> float is the top half of the float's bits, then float -> double.
MGPU_OPS_HD inline std::uint64_t nan_wide_from_bf16(std::uint16_t b) {
  return nan_wide_from_f32(static_cast<std::uint32_t>(b) << 16);
}

/// A widened NaN narrowed to each floating destination type.
MGPU_OPS_HD inline std::uint64_t nan_to_f64(std::uint64_t w) { return w; }
/// double -> float keeps the sign and the payload's top 23 bits, and sets the quiet bit.
MGPU_OPS_HD inline std::uint32_t nan_to_f32(std::uint64_t w) {
  return static_cast<std::uint32_t>((w >> 32) & 0x80000000u) | 0x7F800000u |
         static_cast<std::uint32_t>((w >> 29) & 0x007FFFFFu) | 0x00400000u;
}
/// Through float; float_to_half keeps only the sign and a mantissa bit.
MGPU_OPS_HD inline std::uint16_t nan_to_f16(std::uint64_t w) {
  return static_cast<std::uint16_t>(((nan_to_f32(w) >> 16) & 0x8000u) | 0x7E00u);
}
/// Through float; float_to_bf16 keeps the float's top half with the quiet bit set.
MGPU_OPS_HD inline std::uint16_t nan_to_bf16(std::uint64_t w) {
  return static_cast<std::uint16_t>((nan_to_f32(w) >> 16) | 0x40u);
}

}  // namespace mgpu::detail
