// Private: float -> integer conversions shared by the CPU and the CUDA cast.
// A plain C++ cast of a NaN or out-of-range float to an integer is undefined behaviour;
// GPUs saturate instead (NaN -> 0). Both backends use these, so they agree bit for bit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MGPU_OPS_HD __host__ __device__
#else
#define MGPU_OPS_HD
#endif

namespace mgpu::detail {

MGPU_OPS_HD inline std::int32_t saturate_i32(double v) {
  if (v != v) return 0;                                 // NaN
  if (v >= 2147483648.0) return 2147483647;             // >= 2^31
  if (v <= -2147483649.0) return -2147483647 - 1;       // below -2^31 after truncation
  return static_cast<std::int32_t>(v);                  // truncates toward zero
}

MGPU_OPS_HD inline std::int64_t saturate_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;     // >= 2^63
  if (v < -9223372036854775808.0) return INT64_MIN;     // -2^63 itself is representable
  return static_cast<std::int64_t>(v);
}

}  // namespace mgpu::detail
