/// @file dtype.h
/// @brief Element types (f32, f64, f16, bf16, i32, i64) and the host-side 16-bit floats.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace mgpu {

/// Element type of a tensor.
enum class DType { f32, f64, f16, bf16, i32, i64 };

/// Bytes per element.
std::size_t dtype_size(DType t);
/// "f32", "f64", ... as used in messages and safetensors-like names.
const char* dtype_name(DType t);
/// Parses a name produced by dtype_name(); throws mgpu::Error on anything else.
DType parse_dtype(const std::string& name);
/// True for f32, f64, f16, bf16.
bool is_floating(DType t);

/// IEEE 754 binary16 stored as its bits. Arithmetic goes through float.
struct half {
  std::uint16_t bits = 0;  ///< raw binary16 bit pattern (sign, 5 exponent, 10 mantissa bits)
};
/// bfloat16 (the upper 16 bits of a float) stored as its bits.
struct bfloat16 {
  std::uint16_t bits = 0;  ///< raw bfloat16 bit pattern (sign, 8 exponent, 7 mantissa bits)
};

/// float -> binary16 with round-to-nearest-even; overflow gives inf, NaN stays NaN.
half float_to_half(float f);
/// binary16 -> float (exact).
float half_to_float(half h);
/// float -> bfloat16 with round-to-nearest-even (NaN stays a quiet NaN).
bfloat16 float_to_bf16(float f);
/// bfloat16 -> float (exact: the bits become the top half of a float).
inline float bf16_to_float(bfloat16 b) {
  std::uint32_t u = static_cast<std::uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Maps a C++ type to its DType (used by Tensor::data<T>() checks).
template <typename T> struct dtype_of;
/// @cond
// One specialization per DType; `value` is the matching enumerator.
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
/// @endcond

}  // namespace mgpu
