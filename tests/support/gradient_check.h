// Finite differences for gradient checks in f64 on the CPU: the numeric gradient of any
// scalar loss with respect to a tensor's elements, and the inner product that turns an
// output into such a loss (L = <y, w> for a fixed random w, whose dL/dy is w).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::testing {

/// sum(a * b) over every element (read on the host, in double).
inline double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

/// Central differences of loss() with respect to every element of the f64 CPU tensor `t`
/// (changed in place and put back): the numeric gradient, shaped like t.
inline Tensor numeric_gradient(Tensor& t, const std::function<double()>& loss, double h = 1e-6) {
  Tensor g = Tensor::empty(t.shape(), DType::f64);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double keep = p[i];
    p[i] = keep + h;
    const double up = loss();
    p[i] = keep - h;
    const double down = loss();
    p[i] = keep;
    g.data<double>()[i] = (up - down) / (2 * h);
  }
  return g;
}

}  // namespace mgpu::testing
