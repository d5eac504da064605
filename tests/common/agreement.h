// The agreement checks of lessons 06-08 (tests/NN_topic/agree_*.cpp): a lesson's reference
// (solutions/NN_topic/) and the library's twin of the same function must give the same
// bits on the CPU. On failure the message names the first element where they part.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::agreement {

/// "" when both are undefined, or have the same dtype, shape and bytes; otherwise how they
/// differ (the first differing element with both values).
inline std::string bit_difference(const Tensor& reference, const Tensor& library) {
  if (!reference.defined() || !library.defined()) {
    if (reference.defined() == library.defined()) return "";
    return reference.defined() ? "the library's is undefined" : "the reference's is undefined";
  }
  if (reference.dtype() != library.dtype() || reference.shape() != library.shape())
    return "reference " + reference.str() + ", library " + library.str();
  const Tensor a = reference.to(Device::cpu()), b = library.to(Device::cpu());
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  for (std::size_t i = 0; i < a.nbytes(); ++i) {
    if (pa[i] == pb[i]) continue;
    const std::size_t element = i / dtype_size(a.dtype());
    std::ostringstream os;
    os.precision(17);
    os << "element " << element << " of " << a.str() << ": reference "
       << a.to_vector<double>()[element] << ", library " << b.to_vector<double>()[element];
    return os.str();
  }
  return "";
}

namespace detail {

/// The bits of f as an integer that orders like f (negative values below positive ones).
template <typename I, typename F>
double ordered_bits(F f) {
  I i;
  std::memcpy(&i, &f, sizeof i);
  return static_cast<double>(i < 0 ? std::numeric_limits<I>::min() - i : i);
}

}  // namespace detail

/// The largest distance, in units in the last place, between the elements of two f32 or f64
/// tensors of the same dtype and shape (infinity otherwise).
inline double max_ulps(const Tensor& reference, const Tensor& library) {
  const double inf = std::numeric_limits<double>::infinity();
  if (!reference.defined() || !library.defined() || reference.dtype() != library.dtype() ||
      reference.shape() != library.shape())
    return inf;
  double worst = 0;
  if (reference.dtype() == DType::f32) {
    const std::vector<float> a = reference.to_vector<float>(), b = library.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, std::fabs(detail::ordered_bits<std::int32_t>(a[i]) -
                                        detail::ordered_bits<std::int32_t>(b[i])));
  } else if (reference.dtype() == DType::f64) {
    const std::vector<double> a = reference.to_vector<double>(), b = library.to_vector<double>();
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, std::fabs(detail::ordered_bits<std::int64_t>(a[i]) -
                                        detail::ordered_bits<std::int64_t>(b[i])));
  } else {
    return inf;
  }
  return worst;
}

}  // namespace mgpu::agreement

/// CHECKs that two tensors are bitwise the same (both undefined counts as the same).
#define CHECK_SAME_BITS(reference, library)                                                  \
  do {                                                                                       \
    const std::string agreement_diff_ = ::mgpu::agreement::bit_difference(reference, library); \
    INFO(#reference " vs " #library ": " << agreement_diff_);                                \
    CHECK(agreement_diff_.empty());                                                          \
  } while (false)
