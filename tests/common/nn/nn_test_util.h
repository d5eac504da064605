// Helpers for the nn tests: random tensors, closeness checks, and a finite-difference
// gradient check for any module in f64 on the CPU.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "error_measures.h"
#include "gradient_check.h"
#include "mgpu/nn/module.h"
#include "mgpu/ops.h"
#include "mgpu/tensor.h"
#include "random_data.h"

namespace nntest {

using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;

using mgpu::testing::uniform_tensor;

/// The GPU the [gpu] cases of these tests use.
inline const mgpu::Device kGpu = mgpu::Device::cuda(0);

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

/// Every element within atol + rtol * |expected|; reports the first that is not.
inline void check_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                        const std::string& what) {
  INFO(what << ": actual " << actual.str() << " vs expected " << expected.str());
  REQUIRE(actual.shape() == expected.shape());
  const auto a = values(actual), e = values(expected);
  std::size_t bad = a.size();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(a[i] - e[i]);
    const double allowed = atol + rtol * std::fabs(e[i]);
    if (!(err <= allowed) && bad == a.size()) bad = i;
    worst = std::max(worst, err);
  }
  INFO("largest abs error " << worst);
  if (bad != a.size()) {
    INFO("first mismatch at " << bad << ": " << a[bad] << " vs " << e[bad]);
    CHECK(bad == a.size());
  } else {
    CHECK(true);
  }
}

using mgpu::testing::dot;
using mgpu::testing::numeric_gradient;

/// Central differences of L(x) = sum(forward(x) * weights) against backward(weights), for
/// the input and for every parameter, all elements. `before_forward` runs before each
/// forward (e.g. to rewind a dropout counter so every evaluation uses the same mask).
inline void gradcheck(mgpu::nn::Module& m, Tensor x, std::uint64_t seed,
                      const std::function<void()>& before_forward = [] {},
                      double h = 1e-6, double rtol = 1e-5, double atol = 1e-7) {
  REQUIRE(x.dtype() == DType::f64);
  m.zero_grad();
  before_forward();
  Tensor y = m.forward(x);
  Tensor w = uniform_tensor(y.shape(), seed);  // dL/dy
  Tensor grad_x = m.backward(w);
  REQUIRE(grad_x.shape() == x.shape());

  auto loss = [&]() {
    before_forward();
    Tensor out = m.forward(x);
    m.clear_saved();
    return dot(out, w);
  };
  auto numeric = [&](Tensor& t) { return numeric_gradient(t, loss, h); };
  check_close(grad_x, numeric(x), rtol, atol, m.describe() + " d/dinput");
  for (auto& [name, p] : m.named_parameters()) {
    if (!p->requires_grad()) continue;
    Tensor snapshot = p->grad.clone();
    check_close(snapshot, numeric(p->value), rtol, atol, m.describe() + " d/d" + name);
  }
}

}  // namespace nntest
