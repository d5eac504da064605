// Lesson 12, task 2: the attention core's backward against the chain rule written out in f64
// loops and against central finite differences of the loop forward.
#include "transformer_test_util.h"

using namespace mgpu;
using namespace transformer_test;
using mgpu::testing::random_tensor;

namespace {

struct Case {
  Tensor q, k, v, dy;
  nn::AttentionGrads got;
};

Case run_case(std::int64_t BH, std::int64_t T, std::int64_t D, unsigned salt) {
  Case c;
  c.q = random_tensor({BH, T, D}, salt);
  c.k = random_tensor({BH, T, D}, salt + 1);
  c.v = random_tensor({BH, T, D}, salt + 2);
  c.dy = random_tensor({BH, T, D}, salt + 3);
  // The probabilities from the loops, so that only the backward is under test here.
  const LoopForward f = loop_attention(qkv_of(c.q, c.k, c.v));
  const Tensor probs = Tensor::from_vector(f.p, {BH, T, T});
  c.got = nn::causal_attention_backward(c.dy, c.q, c.k, c.v, probs);
  // What the code under test produced, for the grader to compare with the reference's
  // outside the test process (the checks below compare with loops and differences).
  mgpu::testing::record("dq", c.got.dq.to_vector<double>(), "rel:1e-9");
  mgpu::testing::record("dk", c.got.dk.to_vector<double>(), "rel:1e-9");
  mgpu::testing::record("dv", c.got.dv.to_vector<double>(), "rel:1e-9");
  return c;
}

}  // namespace

TEST_CASE("task2: causal_attention_backward gives the loops' gradients in f64",
          "[12_transformer][task2][points:3]") {
  for (const auto& [BH, T, D] : std::vector<std::array<std::int64_t, 3>>{{6, 7, 5}, {2, 1, 3}, {1, 9, 2}}) {
    INFO("BH " << BH << ", T " << T << ", D " << D);
    const Case c = run_case(BH, T, D, 31);
    REQUIRE(c.got.dq.defined());
    REQUIRE(c.got.dk.defined());
    REQUIRE(c.got.dv.defined());
    REQUIRE(c.got.dq.shape() == Shape({BH, T, D}));
    REQUIRE(c.got.dk.shape() == Shape({BH, T, D}));
    REQUIRE(c.got.dv.shape() == Shape({BH, T, D}));
    const LoopGrads want = loop_attention_grads(qkv_of(c.q, c.k, c.v), c.dy.to_vector<double>());
    CHECK_BELOW("dq against the loops (largest relative difference)",
                rel_diff(c.got.dq.to_vector<double>(), want.dq), 1e-10);
    CHECK_BELOW("dk against the loops (largest relative difference)",
                rel_diff(c.got.dk.to_vector<double>(), want.dk), 1e-10);
    CHECK_BELOW("dv against the loops (largest relative difference)",
                rel_diff(c.got.dv.to_vector<double>(), want.dv), 1e-10);
  }
}

TEST_CASE("task2: every gradient matches central finite differences in f64",
          "[12_transformer][task2][points:2]") {
  const std::int64_t BH = 3, T = 5, D = 4;
  const Case c = run_case(BH, T, D, 41);
  const std::vector<double> dy = c.dy.to_vector<double>();
  Qkv base = qkv_of(c.q, c.k, c.v);
  auto loss = [&](const Qkv& a) {
    const LoopForward f = loop_attention(a);
    double l = 0;
    for (std::size_t i = 0; i < dy.size(); ++i) l += dy[i] * f.y[i];
    return l;
  };
  const double h = 1e-5;
  const std::vector<double> got[3] = {c.got.dq.to_vector<double>(), c.got.dk.to_vector<double>(),
                                      c.got.dv.to_vector<double>()};
  const char* names[3] = {"dq", "dk", "dv"};
  for (int which = 0; which < 3; ++which) {
    std::vector<double> numeric(base.q.size());
    for (std::size_t i = 0; i < numeric.size(); ++i) {
      Qkv plus = base, minus = base;
      std::vector<double>& xp = which == 0 ? plus.q : which == 1 ? plus.k : plus.v;
      std::vector<double>& xm = which == 0 ? minus.q : which == 1 ? minus.k : minus.v;
      xp[i] += h;
      xm[i] -= h;
      numeric[i] = (loss(plus) - loss(minus)) / (2 * h);
    }
    // Central differences carry an error of order h² (about 1e-10) plus rounding (1e-11).
    CHECK_BELOW(names[which] << " against central differences, h = " << sci(h)
                             << " (largest relative difference)",
                rel_diff(got[which], numeric), 1e-8);
  }
}

TEST_CASE("task2: a masked score gets no gradient: the key and value at position s hear "
          "no query row t < s",
          "[12_transformer][task2][points:1]") {
  const std::int64_t BH = 2, T = 6, D = 3;
  const Case c = run_case(BH, T, D, 51);
  // dL/dy of query row t reaches key and value s only through p[t, s], which is 0 for s > t:
  // changing dL/dy in row t alone (of head h alone) must leave dk and dv unchanged at every
  // position after t. Only the backward is under test: the probabilities are the loops'.
  const LoopForward f = loop_attention(qkv_of(c.q, c.k, c.v));
  const Tensor probs = Tensor::from_vector(f.p, {BH, T, T});
  const std::vector<double> dk = c.got.dk.to_vector<double>(), dv = c.got.dv.to_vector<double>();
  const double tolerance = 1e-14;
  for (std::int64_t h = 0; h < BH; ++h)
    for (std::int64_t t = 0; t + 1 < T; ++t) {
      std::vector<double> dy2 = c.dy.to_vector<double>();
      for (std::int64_t d = 0; d < D; ++d) dy2[static_cast<std::size_t>((h * T + t) * D + d)] *= -3.0;
      const nn::AttentionGrads g2 = nn::causal_attention_backward(
          Tensor::from_vector(dy2, {BH, T, D}), c.q, c.k, c.v, probs);
      const std::vector<double> dk2 = g2.dk.to_vector<double>(), dv2 = g2.dv.to_vector<double>();
      for (std::int64_t s = t + 1; s < T; ++s) {
        double worst = 0;  // the largest relative change of dk or dv at position s
        for (std::int64_t d = 0; d < D; ++d) {
          const auto i = static_cast<std::size_t>((h * T + s) * D + d);
          worst = std::max({worst, std::fabs(dk2[i] - dk[i]) / (std::fabs(dk[i]) + 1),
                            std::fabs(dv2[i] - dv[i]) / (std::fabs(dv[i]) + 1)});
        }
        CHECK_BELOW("causal mask leaked in backward: head " << h << ", query t=" << t
                        << " sends gradient to key s=" << s
                        << " (relative change of dk, dv at s when dL/dy changes in row t)",
                    worst, tolerance);
      }
    }
}
