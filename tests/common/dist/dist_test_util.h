// Helpers of the multi-rank dist tests: tensors made from and read back as doubles in any
// dtype (exact for the small integers the tests use); their group is groups.h's cpu_group().
#pragma once

#include <cstdint>
#include <vector>

#include "groups.h"
#include "mgpu/dist/dist.h"
#include "mgpu/tensor.h"

namespace mgpu::testing {

/// quiet_options() with the debug mode `debug` (< 0: the library's default; 0 off; 1 on).
inline dist::GroupOptions options_with_debug(int debug = -1) {
  dist::GroupOptions o = quiet_options();
  o.debug = debug;
  return o;
}

/// A tensor of `dtype` on `device` holding `values` (rounded to the dtype).
inline Tensor make_tensor(const std::vector<double>& values, DType dtype,
                          const Device& device = Device::cpu()) {
  Shape shape{static_cast<std::int64_t>(values.size())};
  switch (dtype) {
    case DType::f32: return Tensor::from_vector(std::vector<float>(values.begin(), values.end()), shape, device);
    case DType::f64: return Tensor::from_vector(values, shape, device);
    case DType::i32: {
      std::vector<std::int32_t> v;
      for (double x : values) v.push_back(static_cast<std::int32_t>(x));
      return Tensor::from_vector(v, shape, device);
    }
    case DType::i64: {
      std::vector<std::int64_t> v;
      for (double x : values) v.push_back(static_cast<std::int64_t>(x));
      return Tensor::from_vector(v, shape, device);
    }
    case DType::f16: {
      std::vector<half> v;
      for (double x : values) v.push_back(float_to_half(static_cast<float>(x)));
      return Tensor::from_vector(v, shape, device);
    }
    case DType::bf16: {
      std::vector<bfloat16> v;
      for (double x : values) v.push_back(float_to_bf16(static_cast<float>(x)));
      return Tensor::from_vector(v, shape, device);
    }
  }
  return Tensor();
}

/// The tensor's elements as doubles (copied to the host first).
inline std::vector<double> values_of(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  std::vector<double> out(static_cast<std::size_t>(h.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (h.dtype()) {
      case DType::f32: out[i] = h.data<float>()[i]; break;
      case DType::f64: out[i] = h.data<double>()[i]; break;
      case DType::i32: out[i] = h.data<std::int32_t>()[i]; break;
      case DType::i64: out[i] = static_cast<double>(h.data<std::int64_t>()[i]); break;
      case DType::f16: out[i] = half_to_float(h.data<half>()[i]); break;
      case DType::bf16: out[i] = bf16_to_float(h.data<bfloat16>()[i]); break;
    }
  }
  return out;
}

/// Rank r's test data: small integers (exact in every dtype, sums too) that differ per rank
/// and per element, so a misplaced chunk or a missing rank shows.
inline std::vector<double> rank_values(int rank, std::int64_t n, int salt = 0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7 + rank * 3 + salt) % 11 + rank);
  return v;
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32,
                                    DType::i64};
  return d;
}

}  // namespace mgpu::testing
