// Shared by lesson 01's graded tests: random tensors, closeness, finite differences.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "lesson01.h"
#include "mgpu/copy.h"
#include "mgpu/ops.h"
#include "random_data.h"

namespace lesson01_test {

using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;

using mgpu::testing::uniform_tensor;

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

/// Largest |a - e| / (atol + rtol * |e|) over the elements: <= 1 means close enough.
inline double worst_ratio(const std::vector<double>& a, const std::vector<double>& e, double rtol,
                          double atol) {
  REQUIRE(a.size() == e.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double r = std::fabs(a[i] - e[i]) / (atol + rtol * std::fabs(e[i]));
    worst = std::isnan(r) ? INFINITY : std::max(worst, r);
  }
  return worst;
}

#define L01_CHECK_CLOSE(actual, expected, rtol, atol)                                    \
  do {                                                                                   \
    const auto a_ = lesson01_test::values(actual);                                       \
    const auto e_ = lesson01_test::values(expected);                                     \
    INFO(#actual " vs " #expected);                                                      \
    CHECK(lesson01_test::worst_ratio(a_, e_, rtol, atol) <= 1.0);                        \
  } while (0)

}  // namespace lesson01_test
