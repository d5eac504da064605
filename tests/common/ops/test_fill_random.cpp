// fill_, uniform_, normal_ on the CPU against definitions written out in the test.
#include <cmath>
#include <limits>

#include "mgpu/rng.h"
#include "ops_test_util.h"

using namespace mgpu;
using namespace opstest;

TEST_CASE("fill_ sets every element, converted to the dtype", "[ops][fill]") {
  for (DType t : all_dtypes())
    for (std::int64_t n : sizes()) {
      Tensor x = Tensor::empty({n}, t);
      fill_(x, -2.75);
      const double want = is_floating(t) ? -2.75 : -2.0;  // integers truncate toward zero
      check_equal(values(x), std::vector<double>(n, want), "fill_ " + name(t));
    }
  // Integers saturate instead of overflowing; NaN becomes 0 (as GPUs convert).
  Tensor i = Tensor::empty({3}, DType::i32);
  fill_(i, 1e20);
  CHECK(values(i)[2] == 2147483647.0);
  fill_(i, -1e20);
  CHECK(values(i)[0] == -2147483648.0);
  fill_(i, std::numeric_limits<double>::quiet_NaN());
  CHECK(values(i)[1] == 0.0);
  Tensor h = Tensor::empty({2}, DType::f16);
  fill_(h, 1e6);  // beyond f16's range: +inf
  CHECK(std::isinf(values(h)[0]));
  // A view fills only its own elements.
  Tensor base = Tensor::zeros({10});
  Tensor mid = base.view(3, {4});
  fill_(mid, 1.0);
  check_equal(values(base), {0, 0, 0, 1, 1, 1, 1, 0, 0, 0}, "fill_ of a view");
}

TEST_CASE("uniform_ is lo + (hi - lo) * U(seed, offset + i), rounded once", "[ops][random]") {
  const double lo = -3.0, hi = 5.0;
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      Tensor x = Tensor::empty({n}, t);
      uniform_(x, 42, lo, hi, 7);
      std::vector<double> want(n);
      for (std::int64_t i = 0; i < n; ++i)
        want[i] = lo + (hi - lo) * static_cast<double>(random_uniform(42, 7 + i));
      // f64 exact; narrower types: one rounding of the f64 value.
      check_close(values(x), want, unit_roundoff(t), 0.0, "uniform_ " + name(t));
      for (double v : values(x)) {
        if (v < lo || v > hi) FAIL("uniform_ value " << v << " outside [" << lo << ", " << hi << "]");
      }
    }
  // Statistics of a large sample: mean 1/2, variance 1/12.
  Tensor big = Tensor::empty({1 << 20}, DType::f64);
  uniform_(big, 3);
  double s = 0, s2 = 0;
  for (double v : values(big)) {
    s += v;
    s2 += v * v;
  }
  const double n = static_cast<double>(big.numel());
  CHECK(std::fabs(s / n - 0.5) < 2e-3);
  CHECK(std::fabs(s2 / n - s * s / (n * n) - 1.0 / 12) < 2e-3);
}

TEST_CASE("uniform_ with an offset continues the same stream", "[ops][random]") {
  Tensor whole = Tensor::empty({100});
  uniform_(whole, 9);
  Tensor tail = Tensor::empty({60});
  uniform_(tail, 9, 0.0, 1.0, 40);
  const auto w = values(whole), t = values(tail);
  check_equal(t, std::vector<double>(w.begin() + 40, w.end()), "offset stream");
  Tensor other = Tensor::empty({100});
  uniform_(other, 10);
  CHECK(values(other) != w);
}

TEST_CASE("normal_ is Box-Muller on Philox words 2i and 2i+1", "[ops][random]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      Tensor x = Tensor::empty({n}, t);
      normal_(x, 5, 1.5, 2.0, 3);
      std::vector<double> want(n);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint64_t c = 3 + static_cast<std::uint64_t>(i);
        const double u1 = (random_u32(5, 2 * c) + 1.0) / 4294967296.0;
        const double u2 = random_u32(5, 2 * c + 1) / 4294967296.0;
        want[i] = 1.5 + 2.0 * std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
      }
      check_close(values(x), want, unit_roundoff(t), 1e-12 + tiny(t), "normal_ " + name(t));
    }
  Tensor big = Tensor::empty({1 << 20}, DType::f64);
  normal_(big, 11);
  double s = 0, s2 = 0, within = 0;
  for (double v : values(big)) {
    s += v;
    s2 += v * v;
    within += std::fabs(v) < 1.0;
  }
  const double n = static_cast<double>(big.numel());
  CHECK(std::fabs(s / n) < 5e-3);
  CHECK(std::fabs(std::sqrt(s2 / n) - 1.0) < 5e-3);
  CHECK(std::fabs(within / n - 0.682689) < 3e-3);
}

TEST_CASE("random fills reject integer tensors", "[ops][random][errors]") {
  Tensor i = Tensor::empty({4}, DType::i64);
  CHECK_THROWS_WITH(uniform_(i, 1), Catch::Contains("uniform_") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(normal_(i, 1), Catch::Contains("normal_") && Catch::Contains("i64"));
}
