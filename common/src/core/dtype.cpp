// Element types and the bit-exact float <-> 16-bit conversions used on the host.
#include "mgpu/dtype.h"

#include "mgpu/error.h"

namespace mgpu {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64})
    if (name == dtype_name(t)) return t;
  MGPU_FAIL("unknown dtype '", name, "' (expected one of f32, f64, f16, bf16, i32, i64)");
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
half float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7FFFFFFFu;
  half h;
  if (abs >= 0x7F800000u) {  // inf or NaN: keep NaN a NaN by forcing a mantissa bit
    h.bits = static_cast<std::uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
    return h;
  }
  if (abs >= 0x477FF000u) {  // rounds to a value >= 65520: overflow to inf
    h.bits = static_cast<std::uint16_t>(sign | 0x7C00u);
    return h;
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Value = abs_float; half subnormal unit is 2^-24. Shift the 24-bit significand.
    if (abs < 0x33000000u) {  // < 2^-25 rounds to zero
      h.bits = static_cast<std::uint16_t>(sign);
      return h;
    }
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;  // how far to move the binary point to units of 2^-24
    std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // round to nearest even
    h.bits = static_cast<std::uint16_t>(sign | q);
    return h;
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits.
  std::uint32_t r = abs - 0x38000000u;  // exponent - 112
  const std::uint32_t rem = r & 0x1FFFu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry may bump the exponent: fine
  h.bits = static_cast<std::uint16_t>(sign | r);
  return h;
}

float half_to_float(half h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  std::uint32_t exp = (h.bits >> 10) & 0x1Fu;
  std::uint32_t mant = h.bits & 0x3FFu;
  std::uint32_t x;
  if (exp == 0x1F) {
    x = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    x = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
    x = sign | ((112u - e) << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

bfloat16 float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  bfloat16 b;
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep it quiet, keep the sign
    b.bits = static_cast<std::uint16_t>((x >> 16) | 0x40u);
    return b;
  }
  // Round to nearest even: add 0x7FFF plus the lowest kept bit, then truncate.
  x += 0x7FFFu + ((x >> 16) & 1u);
  b.bits = static_cast<std::uint16_t>(x >> 16);
  return b;
}

}  // namespace mgpu
