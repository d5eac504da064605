// Error measures for comparing a result with its reference: the largest absolute and
// relative differences of two tensors (on any device, in any dtype) and of two sets of
// named parameters. max_rel_diff's result, compared with a tolerance (`< tol`, `<= tol`,
// `== 0`), records the result it measured for the grader (grade_record.h).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "grade_record.h"
#include "mgpu/tensor.h"

namespace mgpu::testing {

/// A measured difference between a result and its reference: a double to the test. Where
/// results are recorded (grade_record.h), comparing it with a tolerance (`d < tol`,
/// `d <= tol`, `d == 0`) records the result under "max_rel_diff #k" with the relative
/// tolerance 2 tol / (1 - tol): two results within tol of one reference are that close to
/// each other, so a result the test accepts is always within it of the reference build's.
/// Comparisons that check a difference is large (`>`, `>=`) record nothing.
class Difference {
 public:
  /// `value`, measured for the result `got` (kept only where results are recorded).
  Difference(double value, std::vector<double> got)
      : value_(value), got_(grade_record_path().empty() ? std::vector<double>() : std::move(got)) {}

  /// The difference itself.
  operator double() const { return value_; }

  /// value < tol, recording the result.
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator<(const Difference& d, T tol) {
    d.record_within(static_cast<double>(tol));
    return d.value_ < tol;
  }
  /// value <= tol, recording the result.
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator<=(const Difference& d, T tol) {
    d.record_within(static_cast<double>(tol));
    return d.value_ <= tol;
  }
  /// value == x, recording the result where x is 0 (the result equals its reference).
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator==(const Difference& d, T x) {
    if (x == 0) d.record_within(0.0);
    return d.value_ == x;
  }
  /// value != x (records nothing).
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator!=(const Difference& d, T x) { return d.value_ != x; }
  /// value > x (records nothing).
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator>(const Difference& d, T x) { return d.value_ > x; }
  /// value >= x (records nothing).
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  friend bool operator>=(const Difference& d, T x) { return d.value_ >= x; }

 private:
  void record_within(double tol) const {
    if (got_.empty() && grade_record_path().empty()) return;
    char text[40];
    std::snprintf(text, sizeof text, "rel:%.17g", tol < 1 ? 2 * tol / (1 - tol) : INFINITY);
    record(numbered_key("max_rel_diff"), got_, std::string(text));
  }

  double value_;
  std::vector<double> got_;
};

/// Largest |a - b| over two tensors of the same size (infinity when the sizes differ).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::fabs(x[i] - y[i]));
  return d;
}

/// Largest |a - b| / (|b| + 1) over two tensors of the same shape (the test fails when the
/// shapes differ): relative where b is large, absolute where it is near 0. Compared with
/// a tolerance, it records a, the result (see Difference).
inline Difference max_rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector<double>();
  const std::vector<double> y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(x[i] - y[i]) / (std::fabs(y[i]) + 1.0));
  return Difference(worst, std::move(x));
}

/// Largest max_abs_diff between two sets of named parameters (infinity when a name is
/// missing from either).
inline double max_param_diff(const std::map<std::string, Tensor>& a,
                             const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return INFINITY;
    worst = std::max(worst, max_abs_diff(t, it->second));
  }
  return worst;
}

/// True when two tensors (on any devices) hold the same bits: shape, dtype and every byte
/// (NaN-safe, and the sign of a zero counts).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

}  // namespace mgpu::testing

/// Catch2 prints a Difference as the double it is.
template <>
struct Catch::StringMaker<mgpu::testing::Difference> {
  /// The difference as Catch2 prints a double.
  static std::string convert(const mgpu::testing::Difference& d) {
    return Catch::StringMaker<double>::convert(static_cast<double>(d));
  }
};
