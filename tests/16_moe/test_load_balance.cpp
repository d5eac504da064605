// Lesson 16, task 4 in one process: the auxiliary loss (hand values, its factors against
// their definitions, its gradient against central differences in f64, the dtype and device
// it keeps), and the bias update (ties at the mean move nothing).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "expect_error.h"
#include "mgpu/parallel/moe/load_balance.h"

using namespace mgpu;
using namespace mgpu::parallel::moe;

namespace balance_test {

/// Random probabilities [N, E] (rows of positive values summing to 1) and a routing of k
/// distinct random experts per token, not necessarily the top k (the loss takes any), from
/// Catch's --rng-seed.
struct Case {
  std::vector<double> probs;
  Routing routing;
};

inline Case random_case(std::int64_t N, std::int64_t E, std::int64_t k, unsigned salt) {
  std::mt19937 gen(Catch::rngSeed() * 15485863u + salt);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  Case c;
  c.probs.resize(static_cast<std::size_t>(N * E));
  c.routing = Routing{N, E, k, std::vector<std::int32_t>(N * k), std::vector<double>(N * k)};
  std::vector<std::int32_t> experts(E);
  for (std::int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (std::int64_t e = 0; e < E; ++e) sum += c.probs[n * E + e] = u(gen);
    for (std::int64_t e = 0; e < E; ++e) c.probs[n * E + e] /= sum;
    for (std::int64_t e = 0; e < E; ++e) experts[e] = static_cast<std::int32_t>(e);
    std::shuffle(experts.begin(), experts.end(), gen);
    for (std::int64_t j = 0; j < k; ++j) {
      c.routing.expert[n * k + j] = experts[j];
      c.routing.weight[n * k + j] = 1.0 / static_cast<double>(k);
    }
  }
  return c;
}

/// The loss by its definition, computed here: α · E · Σ_e f_e · P_e, f_e the choices of
/// expert e over N·k, P_e the mean of probs[:, e]. Independent of the code under test, so
/// that a gradient check cannot agree with a function that returns nothing.
inline double definition_value(const std::vector<double>& probs, const Routing& r,
                               double alpha) {
  const std::int64_t N = r.tokens, E = r.experts;
  double value = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    std::int64_t count = 0;
    for (const std::int32_t x : r.expert) count += x == e;
    double sum = 0;
    for (std::int64_t n = 0; n < N; ++n) sum += probs[n * E + e];
    value += static_cast<double>(count) / static_cast<double>(N * r.k) * (sum / N);
  }
  return alpha * static_cast<double>(E) * value;
}

}  // namespace balance_test

TEST_CASE("task4: switch_aux_loss on hand cases: a uniform router gives exactly alpha, a "
          "skewed one more, with the gradient alpha · E · f_e / N",
          "[16_moe][task4][points:1]") {
  // Four tokens, four experts, all probabilities 1/4: Σ_e f_e · (1/4) = 1/4 whatever f is,
  // so the loss is α · 4 · 1/4 = α, balanced or not.
  const Tensor uniform = Tensor::full({4, 4}, 0.25, DType::f64);
  const Routing balanced{4, 4, 1, {0, 1, 2, 3}, {1, 1, 1, 1}};
  const AuxLoss a = switch_aux_loss(uniform, balanced, 0.5);
  CHECK(a.value == 0.5);
  CHECK(a.fraction == std::vector<double>{0.25, 0.25, 0.25, 0.25});
  CHECK(a.mean_prob == std::vector<double>{0.25, 0.25, 0.25, 0.25});
  CHECK(a.grad_probs.to_vector<double>() == std::vector<double>(16, 0.5 * 4 * 0.25 / 4));
  const Routing crowded{4, 4, 2, {0, 1, 1, 0, 0, 1, 1, 0}, std::vector<double>(8, 0.5)};
  const AuxLoss b = switch_aux_loss(uniform, crowded, 0.5);
  CHECK(b.value == 0.5);
  CHECK(b.fraction == std::vector<double>{0.5, 0.5, 0.0, 0.0});
  // Two tokens both sent to expert 0, which they favour: f = (1, 0), P = (0.625, 0.375),
  // value = 1 · 2 · 0.625; the gradient 1 · 2 · f_e / 2 on every row.
  const Tensor skewed = Tensor::from_vector(std::vector<double>{0.75, 0.25, 0.5, 0.5}, {2, 2});
  const AuxLoss c = switch_aux_loss(skewed, Routing{2, 2, 1, {0, 0}, {1, 1}}, 1.0);
  CHECK(c.value == 1.25);
  CHECK(c.fraction == std::vector<double>{1.0, 0.0});
  CHECK(c.mean_prob == std::vector<double>{0.625, 0.375});
  CHECK(c.grad_probs.shape() == Shape{2, 2});
  CHECK(c.grad_probs.to_vector<double>() == std::vector<double>{1.0, 0.0, 1.0, 0.0});
  // k = 2: f = (2/4, 1/4, 0, 1/4), P = (0.3, 0.3, 0.2, 0.2): Σ f·P = 0.275, value 1.1·α.
  const Tensor probs = Tensor::from_vector(
      std::vector<double>{0.4, 0.3, 0.2, 0.1, 0.2, 0.3, 0.2, 0.3}, {2, 4});
  const AuxLoss d = switch_aux_loss(probs, Routing{2, 4, 2, {0, 1, 0, 3}, {0.5, 0.5, 0.5, 0.5}},
                                    0.01);
  CHECK(d.value == Approx(0.011).epsilon(1e-14));
  CHECK(d.fraction == std::vector<double>{0.5, 0.25, 0.0, 0.25});
  const std::vector<double> g = d.grad_probs.to_vector<double>();
  for (std::int64_t n = 0; n < 2; ++n) {
    CHECK(g[n * 4 + 0] == Approx(0.01 * 4 * 0.5 / 2).epsilon(1e-14));
    CHECK(g[n * 4 + 1] == Approx(0.01 * 4 * 0.25 / 2).epsilon(1e-14));
    CHECK(g[n * 4 + 2] == 0.0);
    CHECK(g[n * 4 + 3] == Approx(0.01 * 4 * 0.25 / 2).epsilon(1e-14));
  }
}

TEST_CASE("task4: switch_aux_loss's fraction and mean_prob on random cases equal their "
          "definitions, and N = 0 gives zeros", "[16_moe][task4][points:1]") {
  for (const std::int64_t k : {1, 2, 3}) {
    const std::int64_t N = 37, E = 6;
    const balance_test::Case c = balance_test::random_case(N, E, k, static_cast<unsigned>(k));
    INFO("k = " << k);
    const AuxLoss aux =
        switch_aux_loss(Tensor::from_vector(c.probs, {N, E}), c.routing, 0.25);
    REQUIRE(aux.fraction.size() == static_cast<std::size_t>(E));
    REQUIRE(aux.mean_prob.size() == static_cast<std::size_t>(E));
    double value = 0, total = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      std::int64_t count = 0;
      for (const std::int32_t x : c.routing.expert) count += x == e;
      double sum = 0;
      for (std::int64_t n = 0; n < N; ++n) sum += c.probs[n * E + e];
      CHECK(aux.fraction[e] == Approx(static_cast<double>(count) / (N * k)).epsilon(1e-14));
      CHECK(aux.mean_prob[e] == Approx(sum / N).epsilon(1e-13));
      value += 0.25 * E * aux.fraction[e] * aux.mean_prob[e];
      total += aux.fraction[e];
    }
    CHECK(total == Approx(1.0).epsilon(1e-14));
    CHECK(aux.value == Approx(value).epsilon(1e-13));
  }
  const AuxLoss empty =
      switch_aux_loss(Tensor::zeros({0, 4}, DType::f64), Routing{0, 4, 2, {}, {}}, 1.0);
  CHECK(empty.value == 0.0);
  CHECK(empty.fraction == std::vector<double>(4, 0.0));
  CHECK(empty.mean_prob == std::vector<double>(4, 0.0));
  CHECK(empty.grad_probs.shape() == Shape{0, 4});
  using testing::contains;
  using testing::error_of;
  const Routing two_tokens{2, 4, 1, {0, 1}, {1, 1}};
  CHECK(contains(
      error_of([&] { switch_aux_loss(Tensor::zeros({3, 4}, DType::f64), two_tokens, 1.0); }),
      "switch_aux_loss"));
}

TEST_CASE("task4: switch_aux_loss's gradient equals central differences of its value in f64, "
          "the routing held fixed", "[16_moe][task4][points:1]") {
  const std::int64_t N = 9, E = 5, k = 2;
  const double alpha = 0.01, h = 1e-4;
  const balance_test::Case c = balance_test::random_case(N, E, k, 77);
  const AuxLoss aux = switch_aux_loss(Tensor::from_vector(c.probs, {N, E}), c.routing, alpha);
  CHECK(aux.value == Approx(balance_test::definition_value(c.probs, c.routing, alpha))
                         .epsilon(1e-13));
  REQUIRE(aux.grad_probs.dtype() == DType::f64);
  REQUIRE(aux.grad_probs.shape() == Shape{N, E});
  const std::vector<double> grad = aux.grad_probs.to_vector<double>();
  for (std::int64_t i = 0; i < N * E; ++i) {
    std::vector<double> plus = c.probs, minus = c.probs;
    plus[i] += h;
    minus[i] -= h;
    const double numeric = (balance_test::definition_value(plus, c.routing, alpha) -
                            balance_test::definition_value(minus, c.routing, alpha)) /
                           (2 * h);
    INFO("probs[" << i / E << ", " << i % E << "]");
    CHECK(grad[i] == Approx(numeric).epsilon(1e-7).margin(1e-12));
  }
}

TEST_CASE("task4: switch_aux_loss's gradient keeps probs' dtype and device",
          "[16_moe][task4][points:1]") {
  const std::int64_t N = 6, E = 4, k = 2;
  const balance_test::Case c = balance_test::random_case(N, E, k, 5);
  const Tensor f64 = Tensor::from_vector(c.probs, {N, E});
  const AuxLoss want = switch_aux_loss(f64, c.routing, 0.1);
  const Tensor f32 = f64.to(DType::f32).to(Device::cpu(1));
  const AuxLoss got = switch_aux_loss(f32, c.routing, 0.1);
  CHECK(got.grad_probs.dtype() == DType::f32);
  CHECK(got.grad_probs.device() == Device::cpu(1));
  CHECK(got.grad_probs.shape() == Shape{N, E});
  CHECK(got.fraction == want.fraction);
  CHECK(got.value == Approx(want.value).epsilon(1e-6));
  const std::vector<double> g32 = got.grad_probs.to_vector<double>();
  const std::vector<double> g64 = want.grad_probs.to_vector<double>();
  for (std::int64_t i = 0; i < N * E; ++i) CHECK(g32[i] == Approx(g64[i]).epsilon(1e-6));
}

TEST_CASE("task4: update_expert_bias raises the underloaded experts and lowers the overloaded "
          "ones by gamma; an expert at the mean keeps its bias", "[16_moe][task4][points:1]") {
  std::vector<double> bias = {0.0, 0.5, -0.25, 1.0};
  update_expert_bias(bias, {4, 1, 2, 1}, 0.125);  // mean load 2: expert 2 at the mean
  CHECK(bias == std::vector<double>{-0.125, 0.625, -0.25, 1.125});
  std::vector<double> even = {0.25, -0.5, 0.0};
  update_expert_bias(even, {7, 7, 7}, 0.5);  // balanced: nothing moves
  CHECK(even == std::vector<double>{0.25, -0.5, 0.0});
  std::vector<double> third = {0.0, 0.0, 0.0};
  update_expert_bias(third, {3, 0, 1}, 0.25);  // mean 4/3: no expert at it
  CHECK(third == std::vector<double>{-0.25, 0.25, 0.25});
  std::vector<double> none;
  update_expert_bias(none, {}, 0.25);
  CHECK(none.empty());
  CHECK(testing::contains(testing::error_of([&] { update_expert_bias(bias, {1, 2}, 0.1); }),
                          "update_expert_bias"));
}

TEST_CASE("task4: switch_aux_loss of f32 probs on the GPU: its gradient there, in f32, equal "
          "to the CPU's", "[16_moe][task4][points:1][gpu]") {
  const std::int64_t N = 32, E = 8, k = 2;
  const balance_test::Case c = balance_test::random_case(N, E, k, 902);
  const Tensor cpu = Tensor::from_vector(c.probs, {N, E}).to(DType::f32);
  const AuxLoss want = switch_aux_loss(cpu, c.routing, 0.01);
  const AuxLoss got = switch_aux_loss(cpu.to(Device::cuda(0)), c.routing, 0.01);
  // The CPU's result is the definition's (a function that computes nothing agrees with itself
  // on both devices).
  CHECK(want.value ==
        Approx(balance_test::definition_value(cpu.to_vector<double>(), c.routing, 0.01))
            .epsilon(1e-12));
  CHECK(got.grad_probs.device() == Device::cuda(0));
  CHECK(got.grad_probs.dtype() == DType::f32);
  CHECK(got.value == want.value);
  CHECK(got.fraction == want.fraction);
  CHECK(got.mean_prob == want.mean_prob);
  CHECK(got.grad_probs.to_vector<float>() == want.grad_probs.to_vector<float>());
}
