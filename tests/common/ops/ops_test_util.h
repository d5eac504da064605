// Helpers for the op tests: random inputs, reading results back without going through the
// ops under test, unit roundoffs, and a NaN-aware comparison that reports the first miss.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/ops.h"
#include "mgpu/tensor.h"

namespace opstest {

using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;

inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> t = {DType::f32, DType::f64, DType::f16, DType::bf16};
  return t;
}
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> t = {DType::f32, DType::f64, DType::f16,
                                       DType::bf16, DType::i32, DType::i64};
  return t;
}

/// 0, 1, odd, around the 256-thread block, and large enough for many blocks.
inline const std::vector<std::int64_t>& sizes() {
  static const std::vector<std::int64_t> s = {0, 1, 7, 255, 257, 1000, 1 << 20};
  return s;
}

/// Half the distance between 1 and the next value: the relative error of one rounding.
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::f64: return std::ldexp(1.0, -53);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    default: return 0;
  }
}

/// The spacing of the dtype's subnormals: below 2^-14 (f16) a rounded result is only
/// accurate to this absolute step, whatever its relative size.
inline double tiny(DType t) {
  switch (t) {
    case DType::f64: return std::ldexp(1.0, -1074);
    case DType::f32: return std::ldexp(1.0, -149);
    case DType::f16: return std::ldexp(1.0, -24);
    case DType::bf16: return std::ldexp(1.0, -133);
    default: return 0;
  }
}

/// A seed per call, varied by Catch's --rng-seed, so inputs are fresh for every case.
inline std::uint64_t next_seed() {
  static std::uint64_t counter = 0;
  return 1000003ull * (Catch::rngSeed() + 1) + (++counter);
}

/// Uniform [lo, hi) values in `dtype` on the CPU.
inline Tensor random_tensor(const Shape& shape, DType dtype, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  mgpu::uniform_(t, next_seed(), lo, hi);
  return t;
}

/// Every element as double, read straight from memory (a CUDA tensor is copied to the
/// host first). Deliberately does not use cast(), the op under test.
inline std::vector<double> values(const Tensor& t_any) {
  Tensor t = t_any.device().is_cpu() ? t_any : t_any.to(mgpu::Device::cpu());
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::f32: out[i] = t.data<float>()[i]; break;
      case DType::f64: out[i] = t.data<double>()[i]; break;
      case DType::f16: out[i] = mgpu::half_to_float(t.data<mgpu::half>()[i]); break;
      case DType::bf16: out[i] = mgpu::bf16_to_float(t.data<mgpu::bfloat16>()[i]); break;
      case DType::i32: out[i] = t.data<std::int32_t>()[i]; break;
      case DType::i64: out[i] = static_cast<double>(t.data<std::int64_t>()[i]); break;
    }
  }
  return out;
}

/// Checks |got_i - want_i| <= rtol * scale_i + atol for every i (scale empty: |want_i|);
/// NaN matches only NaN. One CHECK per call, naming the first bad element.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want,
                        double rtol, double atol, const std::string& what,
                        const std::vector<double>& scale = {}) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i])   ? std::isnan(got[i])
                    : got[i] == want[i] ? true  // also equal infinities
                                        : std::fabs(got[i] - want[i]) <=
                              rtol * (scale.empty() ? std::fabs(want[i]) : scale[i]) + atol;
    if (!ok && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements differ; first at " << first
            << ": got " << (bad ? got[first] : 0.0) << ", want " << (bad ? want[first] : 0.0));
  CHECK(bad == 0);
}

/// Exact equality (NaN == NaN).
inline void check_equal(const std::vector<double>& got, const std::vector<double>& want,
                        const std::string& what) {
  check_close(got, want, 0.0, 0.0, what);
}

inline std::string name(DType t) { return mgpu::dtype_name(t); }

}  // namespace opstest
