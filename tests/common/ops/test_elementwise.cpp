// Elementwise ops on the CPU against f64 references. Each result is one rounding of the
// exact value, so the tolerance is one unit roundoff of the dtype (of the inputs' scale
// where the op can cancel).
#include <cmath>

#include "ops_test_util.h"

using namespace mgpu;
using namespace opstest;

namespace {

template <typename F>
std::vector<double> zip(const std::vector<double>& a, const std::vector<double>& b, F f) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = f(a[i], b[i]);
  return out;
}

}  // namespace

TEST_CASE("add, sub, mul and their in-place forms", "[ops][elementwise]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      const Tensor a = random_tensor({n}, t), b = random_tensor({n}, t);
      const auto va = values(a), vb = values(b);
      const double u = unit_roundoff(t) * 1.0001;
      const auto sum_want = zip(va, vb, [](double x, double y) { return x + y; });
      const auto diff_want = zip(va, vb, [](double x, double y) { return x - y; });
      const auto prod_want = zip(va, vb, [](double x, double y) { return x * y; });
      check_close(values(add(a, b)), sum_want, u, tiny(t), "add " + name(t));
      check_close(values(sub(a, b)), diff_want, u, tiny(t), "sub " + name(t));
      check_close(values(mul(a, b)), prod_want, u, tiny(t), "mul " + name(t));

      Tensor c = a.clone();
      add_(c, b);
      check_close(values(c), sum_want, u, tiny(t), "add_ " + name(t));
      c = a.clone();
      sub_(c, b);
      check_close(values(c), diff_want, u, tiny(t), "sub_ " + name(t));
      c = a.clone();
      mul_(c, b);
      check_close(values(c), prod_want, u, tiny(t), "mul_ " + name(t));
      check_equal(values(a), va, "inputs untouched");
    }
}

TEST_CASE("elementwise ops keep the shape and work on views", "[ops][elementwise]") {
  Tensor a = random_tensor({3, 5}, DType::f32);
  Tensor b = random_tensor({3, 5}, DType::f32);
  CHECK(add(a, b).shape() == Shape{3, 5});
  Tensor base = Tensor::zeros({20});
  Tensor window = base.view(4, {3, 5});
  add_(window, a);
  const auto v = values(base);
  CHECK(v[3] == 0.0);
  CHECK(v[4] == values(a)[0]);
  CHECK(v[19] == 0.0);
}

TEST_CASE("scale, scale_ and axpy_", "[ops][elementwise]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      const Tensor x = random_tensor({n}, t), y = random_tensor({n}, t);
      const auto vx = values(x), vy = values(y);
      // The scalar is first rounded to the compute type (f32 for 16-bit): one more rounding.
      const double uc = unit_roundoff(t == DType::f64 ? DType::f64 : DType::f32);
      const double u = unit_roundoff(t) * 1.0001;
      std::vector<double> want(n), scale_of(n);
      for (std::int64_t i = 0; i < n; ++i) want[i] = -1.75 * vx[i];  // -1.75 is exact
      check_close(values(scale(x, -1.75)), want, u, tiny(t), "scale " + name(t));
      Tensor c = x.clone();
      scale_(c, -1.75);
      check_close(values(c), want, u, tiny(t), "scale_ " + name(t));

      const double alpha = 0.3;  // not exact: its rounding is part of the error
      for (std::int64_t i = 0; i < n; ++i) {
        want[i] = vy[i] + alpha * vx[i];
        scale_of[i] = std::fabs(vy[i]) + std::fabs(alpha * vx[i]);
      }
      c = y.clone();
      axpy_(c, alpha, x);
      check_close(values(c), want, u + 3 * uc, tiny(t), "axpy_ " + name(t), scale_of);
    }
}

TEST_CASE("add_rowwise_ adds the bias to every row", "[ops][elementwise]") {
  const std::vector<Shape> y_shapes = {{0, 5}, {1, 1}, {7, 13}, {300, 257}, {2, 3, 4}, {1024, 1024}};
  for (DType t : float_dtypes())
    for (const Shape& s : y_shapes) {
      const Tensor y = random_tensor(s, t);
      const Tensor bias = random_tensor({s.back()}, t);
      const auto vy = values(y), vb = values(bias);
      std::vector<double> want(vy.size()), scale_of(vy.size());
      for (std::size_t i = 0; i < vy.size(); ++i) {
        want[i] = vy[i] + vb[i % vb.size()];
        scale_of[i] = std::fabs(vy[i]) + std::fabs(vb[i % vb.size()]);
      }
      Tensor out = y.clone();
      add_rowwise_(out, bias);
      check_close(values(out), want, unit_roundoff(t) * 1.0001, tiny(t),
                  "add_rowwise_ " + name(t) + shape_str(s), scale_of);
    }
  Tensor y = Tensor::zeros({4, 6});
  CHECK_THROWS_WITH(add_rowwise_(y, Tensor::zeros({5})),
                    Catch::Contains("add_rowwise_") && Catch::Contains("[4, 6]") &&
                        Catch::Contains("[5]"));
}

TEST_CASE("relu and relu_backward", "[ops][elementwise]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      const Tensor x = random_tensor({n}, t), g = random_tensor({n}, t);
      const auto vx = values(x), vg = values(g);
      std::vector<double> fwd(n), bwd(n);
      for (std::int64_t i = 0; i < n; ++i) {
        fwd[i] = vx[i] > 0 ? vx[i] : 0.0;
        bwd[i] = vx[i] > 0 ? vg[i] : 0.0;
      }
      check_equal(values(relu(x)), fwd, "relu " + name(t));
      check_equal(values(relu_backward(g, x)), bwd, "relu_backward " + name(t));
    }
}
