// Fused softmax cross-entropy on the CPU: against an f64 reference, on huge logits, and
// its gradient against central finite differences in f64.
#include <cmath>

#include "ops_reference.h"

using namespace mgpu;
using namespace opstest;

TEST_CASE("softmax_cross_entropy matches an f64 reference", "[ops][loss]") {
  for_each_xent_case([](const XentCase& c) {
    std::vector<double> want_probs;
    const double want = xent_reference(values(c.logits), values(c.labels), c.s.rows, c.s.classes,
                                       want_probs);
    Tensor probs;
    const Tensor loss = softmax_cross_entropy(c.logits, c.labels, &probs);
    const DType acc = c.t == DType::f64 ? DType::f64 : DType::f32;
    CHECK(loss.shape() == Shape{});
    CHECK(loss.dtype() == acc);
    CHECK(probs.dtype() == c.t);
    CHECK(probs.shape() == c.logits.shape());
    // exp/log in the accumulation type over <= 1000 classes: a few hundred roundings.
    const double tol = 64 * unit_roundoff(acc) * (1 + std::fabs(want));
    if (c.s.rows == 0) {
      CHECK(std::isnan(loss.item()));
    } else {
      INFO(c.what << ": loss " << loss.item() << " want " << want);
      CHECK(std::fabs(loss.item() - want) <= tol);
    }
    check_close(values(probs), want_probs, unit_roundoff(c.t) + 64 * unit_roundoff(acc), tiny(c.t),
                "probs " + c.what);
    // Without probs the loss is the same.
    check_equal(values(softmax_cross_entropy(c.logits, c.labels)), values(loss), "no probs " + c.what);
  });
}

TEST_CASE("softmax_cross_entropy is stable for huge logits", "[ops][loss]") {
  for (DType t : float_dtypes()) {
    // exp(1000) overflows even f64; the max-shift keeps every exponent <= 0. bf16/f16
    // store 1000 and 1001 inexactly, so the test reads back what was stored.
    const Tensor logits = cast(Tensor::from_vector(std::vector<double>{1000, 1001, 999,
                                                                       -1000, -1001, -999},
                                                   {2, 3}), t);
    const Tensor labels = Tensor::from_vector(std::vector<std::int32_t>{0, 2}, {2});
    std::vector<double> want_probs;
    const double want = xent_reference(values(logits), {0, 2}, 2, 3, want_probs);
    Tensor probs;
    const double got = softmax_cross_entropy(logits, labels, &probs).item();
    INFO(name(t) << ": loss " << got << " want " << want);
    CHECK(std::isfinite(got));
    CHECK(std::fabs(got - want) <= 1e-5 * (1 + want));
    check_close(values(probs), want_probs, unit_roundoff(t) * 2, 1e-7, "huge-logit probs " + name(t));
  }
}

TEST_CASE("softmax_cross_entropy_backward is (p - onehot) * scale / N", "[ops][loss]") {
  for (DType t : float_dtypes())
    for (const XentShape& s : xent_shapes()) {
      const Tensor logits = random_tensor({s.rows, s.classes}, t, -4.0, 4.0);
      const Tensor labels = random_labels(s.rows, s.classes, DType::i64);
      Tensor probs;
      softmax_cross_entropy(logits, labels, &probs);
      const auto p = values(probs), y = values(labels);
      std::vector<double> want(p.size()), scale(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) {
        const std::int64_t r = static_cast<std::int64_t>(i) / s.classes;
        const double onehot = (static_cast<std::int64_t>(i) % s.classes) == y[r] ? 1.0 : 0.0;
        want[i] = (p[i] - onehot) * 2.5 / s.rows;
        scale[i] = (std::fabs(p[i]) + onehot) * 2.5 / s.rows;
      }
      const Tensor grad = softmax_cross_entropy_backward(probs, labels, 2.5);
      CHECK(grad.shape() == probs.shape());
      CHECK(grad.dtype() == t);
      const double uacc = unit_roundoff(t == DType::f64 ? DType::f64 : DType::f32);
      check_close(values(grad), want, unit_roundoff(t) + 4 * uacc, tiny(t), "backward " + name(t), scale);
    }
}

TEST_CASE("softmax_cross_entropy gradient matches finite differences (f64)", "[ops][loss]") {
  const std::int64_t rows = 5, classes = 7;
  Tensor logits = random_tensor({rows, classes}, DType::f64, -3.0, 3.0);
  const Tensor labels = random_labels(rows, classes, DType::i32);
  Tensor probs;
  softmax_cross_entropy(logits, labels, &probs);
  const auto grad = values(softmax_cross_entropy_backward(probs, labels));
  const double h = 1e-5;
  for (std::int64_t i = 0; i < logits.numel(); ++i) {
    double* x = logits.data<double>() + i;
    const double saved = *x;
    *x = saved + h;
    const double up = softmax_cross_entropy(logits, labels).item();
    *x = saved - h;
    const double down = softmax_cross_entropy(logits, labels).item();
    *x = saved;
    const double fd = (up - down) / (2 * h);
    INFO("element " << i << ": analytic " << grad[i] << ", finite difference " << fd);
    CHECK(std::fabs(fd - grad[i]) < 1e-8);
  }
}

TEST_CASE("softmax_cross_entropy rejects bad labels and operands", "[ops][loss][errors]") {
  const Tensor logits = Tensor::zeros({3, 10});
  const Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{1, 10, 2}, {3});
  CHECK_THROWS_WITH(softmax_cross_entropy(logits, bad),
                    Catch::Contains("softmax_cross_entropy") && Catch::Contains("label 10") &&
                        Catch::Contains("row 1") && Catch::Contains("[0, 10)"));
  const Tensor negative = Tensor::from_vector(std::vector<std::int32_t>{0, 0, -1}, {3});
  CHECK_THROWS_WITH(softmax_cross_entropy(logits, negative),
                    Catch::Contains("label -1") && Catch::Contains("row 2"));
  CHECK_THROWS_WITH(softmax_cross_entropy_backward(logits, bad),
                    Catch::Contains("softmax_cross_entropy_backward") && Catch::Contains("label 10"));
  CHECK_THROWS_WITH(softmax_cross_entropy(logits, Tensor::zeros({4}, DType::i64)),
                    Catch::Contains("softmax_cross_entropy") && Catch::Contains("[4]") &&
                        Catch::Contains("[3, 10]"));
  CHECK_THROWS_WITH(softmax_cross_entropy(logits, Tensor::zeros({3}, DType::f32)),
                    Catch::Contains("i32 or i64") && Catch::Contains("f32[3]"));
  CHECK_THROWS_WITH(softmax_cross_entropy(Tensor::zeros({30}), Tensor::zeros({30}, DType::i64)),
                    Catch::Contains("2-D") && Catch::Contains("[30]"));
  CHECK_THROWS_WITH(softmax_cross_entropy(logits, Tensor::zeros({3}, DType::i64, Device::cpu(1))),
                    Catch::Contains("cpu:0") && Catch::Contains("cpu:1"));
}
