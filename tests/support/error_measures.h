// Error measures for comparing a result with its reference: the largest absolute and
// relative differences of two tensors (on any device, in any dtype) and of two sets of
// named parameters.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::testing {

/// Largest |a - b| over two tensors of the same size (infinity when the sizes differ).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::fabs(x[i] - y[i]));
  return d;
}

/// Largest |a - b| / (|b| + 1) over two tensors of the same shape (the test fails when the
/// shapes differ): relative where b is large, absolute where it is near 0.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(x[i] - y[i]) / (std::fabs(y[i]) + 1.0));
  return worst;
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

}  // namespace mgpu::testing
