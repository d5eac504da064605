// 16-bit float conversions against exhaustive checks and IEEE rounding rules.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "mgpu/dtype.h"

using namespace mgpu;

namespace {
float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("every finite half survives float and back", "[core][dtype]") {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    half h{static_cast<std::uint16_t>(b)};
    const float f = half_to_float(h);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    REQUIRE(float_to_half(f).bits == h.bits);
  }
}

TEST_CASE("float to half rounds to nearest, ties to even", "[core][dtype]") {
  // Between consecutive halves a and b, the exact midpoint goes to the even one and
  // anything nearer one side goes to that side. Checked for every positive finite pair.
  for (std::uint32_t b = 0; b < 0x7BFFu; ++b) {
    const float lo = half_to_float(half{static_cast<std::uint16_t>(b)});
    const float hi = half_to_float(half{static_cast<std::uint16_t>(b + 1)});
    const double mid = (static_cast<double>(lo) + hi) / 2;
    const float midf = static_cast<float>(mid);  // exact: halves have 11 significant bits
    const std::uint16_t even = (b % 2 == 0) ? b : b + 1;
    REQUIRE(float_to_half(midf).bits == even);
    REQUIRE(float_to_half(std::nextafter(midf, 0.0f)).bits == b);
    REQUIRE(float_to_half(std::nextafter(midf, 1e9f)).bits == b + 1);
  }
}

TEST_CASE("half overflow, underflow, sign and NaN", "[core][dtype]") {
  CHECK(half_to_float(float_to_half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(half_to_float(float_to_half(65520.0f))));
  CHECK(half_to_float(float_to_half(65519.0f)) == 65504.0f);
  CHECK(float_to_half(-0.0f).bits == 0x8000u);
  CHECK(float_to_half(1e-10f).bits == 0);
  CHECK(half_to_float(float_to_half(5.9604645e-8f)) == 5.9604645e-8f);  // smallest subnormal
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(half_to_float(float_to_half(-std::numeric_limits<float>::infinity()))));
}

TEST_CASE("bfloat16 keeps the top 16 bits with round to nearest even", "[core][dtype]") {
  CHECK(float_to_bf16(1.0f).bits == 0x3F80u);
  CHECK(float_to_bf16(bits_to_float(0x3F808000u)).bits == 0x3F80u);  // tie -> even (down)
  CHECK(float_to_bf16(bits_to_float(0x3F818000u)).bits == 0x3F82u);  // tie -> even (up)
  CHECK(float_to_bf16(bits_to_float(0x3F808001u)).bits == 0x3F81u);  // above the tie
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t b = 0; b < 0x7F80u; b += 7) {
    bfloat16 x{static_cast<std::uint16_t>(b)};
    REQUIRE(float_to_bf16(bf16_to_float(x)).bits == x.bits);
  }
}

TEST_CASE("dtype names and sizes", "[core][dtype]") {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64})
    CHECK(parse_dtype(dtype_name(t)) == t);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK_THROWS_WITH(parse_dtype("float"), Catch::Contains("expected one of"));
}
