// Private: element conversion between any two dtypes on the CPU (cast, fill).
// Every value is first widened to what it exactly represents (integers to int64, floats to
// double), then narrowed to the destination: round-to-nearest-even for floats, truncation
// with saturation for float -> integer, wrap-around for i64 -> i32 (as in C++ and CUDA).
// 16-bit destinations round through float, exactly as the CUDA cast does.
#pragma once

#include <cstdint>

#include "mgpu/dtype.h"
#include "saturate.h"

namespace mgpu::detail {

inline double widen(float v) { return v; }
inline double widen(double v) { return v; }
inline double widen(half v) { return half_to_float(v); }
inline double widen(bfloat16 v) { return bf16_to_float(v); }
inline std::int64_t widen(std::int32_t v) { return v; }
inline std::int64_t widen(std::int64_t v) { return v; }

template <typename Dst> Dst narrow(double v);
template <> inline float narrow<float>(double v) { return static_cast<float>(v); }
template <> inline double narrow<double>(double v) { return v; }
template <> inline half narrow<half>(double v) { return float_to_half(static_cast<float>(v)); }
template <> inline bfloat16 narrow<bfloat16>(double v) {
  return float_to_bf16(static_cast<float>(v));
}
template <> inline std::int32_t narrow<std::int32_t>(double v) { return saturate_i32(v); }
template <> inline std::int64_t narrow<std::int64_t>(double v) { return saturate_i64(v); }

template <typename Dst> Dst narrow(std::int64_t v);
template <> inline float narrow<float>(std::int64_t v) { return static_cast<float>(v); }
template <> inline double narrow<double>(std::int64_t v) { return static_cast<double>(v); }
template <> inline half narrow<half>(std::int64_t v) {
  return float_to_half(static_cast<float>(v));
}
template <> inline bfloat16 narrow<bfloat16>(std::int64_t v) {
  return float_to_bf16(static_cast<float>(v));
}
template <> inline std::int32_t narrow<std::int32_t>(std::int64_t v) {
  return static_cast<std::int32_t>(v);
}
template <> inline std::int64_t narrow<std::int64_t>(std::int64_t v) { return v; }

/// Src -> Dst with the rules above.
template <typename Dst, typename Src>
inline Dst convert(Src v) {
  return narrow<Dst>(widen(v));
}

}  // namespace mgpu::detail
