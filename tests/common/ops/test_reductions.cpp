// Reductions on the CPU against naive f64 sums written out here.
#include <cmath>
#include <limits>

#include "ops_reference.h"

using namespace mgpu;
using namespace opstest;

TEST_CASE("sum and mean of a whole tensor", "[ops][reduce]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      const Tensor x = random_tensor({n}, t);
      const auto v = values(x);
      double want = 0, scale = 0;
      for (double e : v) {
        want += e;
        scale += std::fabs(e);
      }
      const DType out_t = t == DType::f64 ? DType::f64 : DType::f32;
      const Tensor s = sum(x), m = mean(x);
      CHECK(s.shape() == Shape{});
      CHECK(s.dtype() == out_t);
      CHECK(m.dtype() == out_t);
      // Accumulated at least in f32: allow a few roundings of the running sum's scale.
      const double tol = 4 * unit_roundoff(out_t) * scale;
      CHECK(std::fabs(values(s)[0] - want) <= tol);
      if (n == 0) {
        CHECK(values(s)[0] == 0.0);
        CHECK(std::isnan(values(m)[0]));
      } else {
        CHECK(std::fabs(values(m)[0] - want / n) <= tol / n);
      }
    }
  // Integers up to 2^24 are exact in f32: a sum of ones must be exactly n.
  Tensor ones = Tensor::full({(1 << 20) + 3}, 1.0, DType::bf16);
  CHECK(sum(ones).item() == (1 << 20) + 3);
  CHECK(mean(ones).item() == 1.0);
}

TEST_CASE("sum and mean along an axis", "[ops][reduce]") {
  for_each_axis_case([](AxisCase& c) {
    Shape out_shape = c.s;
    out_shape.erase(out_shape.begin() + c.a);
    const Tensor got = sum(c.x, c.axis);
    CHECK(got.shape() == out_shape);
    CHECK(got.dtype() == c.t);
    // One rounding to the output dtype, plus accumulation error (f32 or better).
    const double uacc = unit_roundoff(c.t == DType::f64 ? DType::f64 : DType::f32);
    check_close(values(got), c.want, unit_roundoff(c.t) + 4 * uacc, tiny(c.t), "sum " + c.what, c.scale);
    const double n = static_cast<double>(c.s[c.a]);
    for (std::size_t i = 0; i < c.want.size(); ++i) {
      c.want[i] /= n;  // 0/0 = NaN for an empty axis
      c.scale[i] /= n;
    }
    check_close(values(mean(c.x, c.axis)), c.want, unit_roundoff(c.t) + 4 * uacc, tiny(c.t),
                "mean " + c.what, c.scale);
  });
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(sum(x, 2), Catch::Contains("sum") && Catch::Contains("axis 2") &&
                                   Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(mean(x, -3), Catch::Contains("mean") && Catch::Contains("axis -3"));
}

TEST_CASE("max_last and argmax_last", "[ops][reduce]") {
  const std::vector<Shape> shapes = {{0, 5}, {1}, {1, 1}, {7, 13}, {300, 257}, {2, 3, 33},
                                     {4, 1000}, {1, 1 << 20}};
  for (DType t : float_dtypes())
    for (const Shape& s : shapes) {
      const Tensor x = random_tensor(s, t);
      const auto v = values(x);
      const std::int64_t n = s.back(), rows = x.numel() / n;
      std::vector<double> want_max(rows), want_arg(rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        std::int64_t best = 0;
        for (std::int64_t j = 1; j < n; ++j)
          if (v[r * n + j] > v[r * n + best]) best = j;  // strict: the first maximum wins
        want_max[r] = v[r * n + best];
        want_arg[r] = static_cast<double>(best);
      }
      const Tensor m = max_last(x), a = argmax_last(x);
      const Shape out_shape(s.begin(), s.end() - 1);
      CHECK(m.shape() == out_shape);
      CHECK(a.shape() == out_shape);
      CHECK(a.dtype() == DType::i64);
      CHECK(m.dtype() == t);
      check_equal(values(m), want_max, "max_last " + name(t) + shape_str(s));
      check_equal(values(a), want_arg, "argmax_last " + name(t) + shape_str(s));
    }
}

TEST_CASE("argmax_last: ties go to the first index, NaN wins", "[ops][reduce]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = Tensor::from_vector(std::vector<double>{1, 3, 3, 2,
                                                     5, 5, 5, 5,
                                                     -1, nan, 4, nan},
                                 {3, 4});
  check_equal(values(argmax_last(x)), {1, 0, 1}, "ties and NaN");
  const auto m = values(max_last(x));
  CHECK(m[0] == 3.0);
  CHECK(std::isnan(m[2]));
  CHECK_THROWS_WITH(max_last(Tensor::zeros({3, 0})),
                    Catch::Contains("max_last") && Catch::Contains("[3, 0]"));
  CHECK_THROWS_WITH(argmax_last(Tensor::zeros({})), Catch::Contains("argmax_last"));
}
