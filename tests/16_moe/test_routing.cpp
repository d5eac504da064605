// Lesson 16, task 1 in one process: the router's top-k and the capacity slots, integer-exact
// against the stated rules: hand cases with ties, a bias and the priority rule's trap, and
// random cases against a second implementation written from the rules (the k experts by
// repeated arg-max; a choice's slot as the count of its expert's choices before it).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "expect_error.h"
#include "mgpu/parallel/moe/routing.h"

using namespace mgpu;
using namespace mgpu::parallel::moe;

namespace routing_test {

/// Random router probabilities [N, E] (f64): each row some random non-negative integers
/// (0 .. levels - 1, so ties are frequent) over their sum, seeded from Catch's --rng-seed.
inline std::vector<double> tied_probs(std::int64_t N, std::int64_t E, int levels,
                                      unsigned salt) {
  std::mt19937 gen(Catch::rngSeed() * 7919u + salt);
  std::uniform_int_distribution<int> level(0, levels - 1);
  std::vector<double> p(static_cast<std::size_t>(N * E));
  for (std::int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (std::int64_t e = 0; e < E; ++e) sum += p[n * E + e] = level(gen) + (e == n % E);
    for (std::int64_t e = 0; e < E; ++e) p[n * E + e] /= sum;
  }
  return p;
}

/// The top-k by repeated arg-max: the j-th choice is the best expert not chosen yet, the
/// first one met (the lowest index) among equal scores.
inline Routing arg_max_routing(const std::vector<double>& p, std::int64_t N, std::int64_t E,
                               std::int64_t k, const std::vector<double>& bias) {
  Routing r{N, E, k, std::vector<std::int32_t>(N * k), std::vector<double>(N * k)};
  for (std::int64_t n = 0; n < N; ++n) {
    std::vector<bool> taken(E, false);
    double sum = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t best = -1;
      double best_score = -std::numeric_limits<double>::infinity();
      for (std::int64_t e = 0; e < E; ++e) {
        const double score = p[n * E + e] + (bias.empty() ? 0.0 : bias[e]);
        if (!taken[e] && (best < 0 || score > best_score)) best = e, best_score = score;
      }
      taken[best] = true;
      r.expert[n * k + j] = static_cast<std::int32_t>(best);
      sum += p[n * E + best];
    }
    for (std::int64_t j = 0; j < k; ++j)
      r.weight[n * k + j] = sum > 0 ? p[n * E + r.expert[n * k + j]] / sum : 1.0 / k;
  }
  return r;
}

/// The slots by the rule itself: choice (n, j) of expert e ranks after the choices (n', j')
/// of e with j' < j, or j' == j and n' < n; it is kept when its rank is below the capacity
/// (every choice before it then kept too), and its rank is its slot.
inline std::vector<std::int64_t> ranked_slots(const Routing& r, std::int64_t capacity) {
  const std::int64_t N = r.tokens, k = r.k;
  std::vector<std::int64_t> slots(N * k, -1);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t rank = 0;
      for (std::int64_t n2 = 0; n2 < N; ++n2)
        for (std::int64_t j2 = 0; j2 < k; ++j2)
          if (r.expert[n2 * k + j2] == r.expert[n * k + j] && (j2 < j || (j2 == j && n2 < n)))
            ++rank;
      if (capacity < 0 || rank < capacity) slots[n * k + j] = rank;
    }
  return slots;
}

}  // namespace routing_test

TEST_CASE("task1: route_top_k picks the k best experts, best first, and renormalises their "
          "probabilities", "[16_moe][task1][points:1]") {
  const Tensor probs = Tensor::from_vector(std::vector<double>{0.1, 0.5, 0.3, 0.1,   //
                                                               0.4, 0.2, 0.2, 0.2},
                                           {2, 4});
  const Routing r = route_top_k(probs, 2);
  CHECK(r.tokens == 2);
  CHECK(r.experts == 4);
  CHECK(r.k == 2);
  CHECK(r.expert == std::vector<std::int32_t>{1, 2, 0, 1});
  REQUIRE(r.weight.size() == 4);
  CHECK(r.weight[0] == Approx(0.5 / 0.8).epsilon(1e-15));
  CHECK(r.weight[1] == Approx(0.3 / 0.8).epsilon(1e-15));
  CHECK(r.weight[2] == Approx(0.4 / 0.6).epsilon(1e-15));
  CHECK(r.weight[3] == Approx(0.2 / 0.6).epsilon(1e-15));
}

TEST_CASE("task1: route_top_k gives ties to the lower expert, takes k = 1 and k = E, and "
          "refuses a bad k or bias", "[16_moe][task1][points:1]") {
  using testing::contains;
  using testing::error_of;
  const Tensor probs = Tensor::from_vector(std::vector<double>{0.25, 0.25, 0.25, 0.25,  //
                                                               0.125, 0.375, 0.125, 0.375,  //
                                                               0.5, 0.0, 0.5, 0.0},
                                           {3, 4});
  const Routing two = route_top_k(probs, 2);
  CHECK(two.expert == std::vector<std::int32_t>{0, 1, 1, 3, 0, 2});
  CHECK(two.weight == std::vector<double>{0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  const Routing three = route_top_k(probs, 3);
  CHECK(three.expert == std::vector<std::int32_t>{0, 1, 2, 1, 3, 0, 0, 2, 1});
  CHECK(three.weight[3] == Approx(0.375 / 0.875).epsilon(1e-15));
  CHECK(three.weight[5] == Approx(0.125 / 0.875).epsilon(1e-15));
  CHECK(three.weight[8] == 0.0);
  const Routing one = route_top_k(probs, 1);
  CHECK(one.k == 1);
  CHECK(one.expert == std::vector<std::int32_t>{0, 1, 0});
  CHECK(one.weight == std::vector<double>{1.0, 1.0, 1.0});
  // k = E: every expert, best first, the weights the probabilities themselves.
  const Routing all = route_top_k(probs, 4);
  CHECK(all.expert == std::vector<std::int32_t>{0, 1, 2, 3, 1, 3, 0, 2, 0, 2, 1, 3});
  for (std::int64_t n = 0; n < 3; ++n)
    for (std::int64_t j = 0; j < 4; ++j)
      CHECK(all.weight[n * 4 + j] ==
            Approx(probs.to_vector<double>()[n * 4 + all.expert[n * 4 + j]]).epsilon(1e-15));

  CHECK(contains(error_of([&] { route_top_k(probs, 0); }), "k = 0"));
  CHECK(contains(error_of([&] { route_top_k(probs, 5); }), "k = 5"));
  CHECK(contains(error_of([&] { route_top_k(probs, 2, {0.1, 0.2, 0.3}); }), "bias has 3"));
  const Tensor nan = Tensor::from_vector(std::vector<double>{0.5, std::nan(""), 0.5, 0.0},
                                         {1, 4});
  CHECK(contains(error_of([&] { route_top_k(nan, 1); }), "probs[0, 1]"));
}

TEST_CASE("task1: route_top_k's bias moves the selection and never the weights; chosen "
          "probabilities all 0 share 1/k; f32 probs give the same choices",
          "[16_moe][task1][points:1]") {
  const std::vector<double> p = {0.5, 0.3, 0.2, 0.0,  //
                                 0.25, 0.5, 0.125, 0.125};
  const Tensor probs = Tensor::from_vector(p, {2, 4});
  // Without the bias token 0 goes to 0 then 1; the bias lifts expert 2 above both.
  const Routing plain = route_top_k(probs, 2);
  CHECK(plain.expert == std::vector<std::int32_t>{0, 1, 1, 0});
  const std::vector<double> bias = {0.0, 0.0, 0.5, 0.25};
  const Routing biased = route_top_k(probs, 2, bias);
  // Scores: 0.5 0.3 0.7 0.25 and 0.25 0.5 0.625 0.375.
  CHECK(biased.expert == std::vector<std::int32_t>{2, 0, 2, 1});
  CHECK(biased.weight[0] == Approx(0.2 / 0.7).epsilon(1e-15));
  CHECK(biased.weight[1] == Approx(0.5 / 0.7).epsilon(1e-15));
  CHECK(biased.weight[2] == Approx(0.125 / 0.625).epsilon(1e-15));
  CHECK(biased.weight[3] == Approx(0.5 / 0.625).epsilon(1e-15));
  // A bias that makes a tie (token 1: 0.25 + 0.25 == 0.5): the lower index first.
  const Routing tie = route_top_k(probs, 1, {0.25, 0.0, 0.0, 0.0});
  CHECK(tie.expert == std::vector<std::int32_t>{0, 0});
  const Routing tie2 = route_top_k(probs, 2, {0.0, 0.0, 0.0, 0.375});
  CHECK(tie2.expert == std::vector<std::int32_t>{0, 3, 1, 3});
  // The bias chose experts the router gives nothing: the weights are 1/k, not NaN.
  const Routing zero = route_top_k(probs, 2, {0.0, 0.0, 0.0, 1.0});
  CHECK(zero.expert == std::vector<std::int32_t>{3, 0, 3, 1});
  const Tensor nothing = Tensor::from_vector(std::vector<double>{0.0, 1.0, 0.0, 0.0}, {1, 4});
  const Routing shared = route_top_k(nothing, 2, {1.0, -0.5, 1.0, 0.5});
  CHECK(shared.expert == std::vector<std::int32_t>{0, 2});
  CHECK(shared.weight == std::vector<double>{0.5, 0.5});
  // f32 on the way in: the same choices (no two scores are near each other).
  const Routing f32 = route_top_k(probs.to(DType::f32), 2, bias);
  CHECK(f32.expert == biased.expert);
  CHECK(f32.weight[3] == Approx(0.5 / 0.625).epsilon(1e-7));
}

TEST_CASE("task1: expert_capacity is ceil(factor · N · k / E), -1 for a factor <= 0",
          "[16_moe][task1][points:1]") {
  CHECK(expert_capacity(10, 2, 4, 1.0) == 5);
  CHECK(expert_capacity(10, 1, 4, 1.0) == 3);    // 2.5 slots: round up
  CHECK(expert_capacity(7, 2, 4, 1.5) == 6);     // 5.25
  CHECK(expert_capacity(8, 2, 4, 1.25) == 5);    // exactly 5
  CHECK(expert_capacity(10, 1, 4, 0.001) == 1);  // a fraction of a slot is a slot
  CHECK(expert_capacity(1000, 2, 8, 2.0) == 500);
  CHECK(expert_capacity(0, 2, 4, 1.0) == 0);
  CHECK(expert_capacity(10, 2, 4, 0.0) == -1);
  CHECK(expert_capacity(10, 2, 4, -1.0) == -1);
  CHECK(testing::contains(
      testing::error_of([] { expert_capacity(10, 2, 4, std::nan("")); }), "capacity_factor"));
}

TEST_CASE("task1: capacity_slots hands slots out first choices first: a second choice never "
          "takes a first choice's place; dropless numbers every choice; capacity 0 drops all",
          "[16_moe][task1][points:2]") {
  // Token 0 chooses 1 then 0; token 1 chooses 0 first. In token order token 0's second
  // choice would fill expert 0 before token 1's first choice reaches it.
  Routing r{3, 3, 2, {1, 0, 0, 2, 2, 1}, {0.5, 0.5, 0.5, 0.5, 0.5, 0.5}};
  CHECK(capacity_slots(r, 1) == std::vector<std::int64_t>{0, -1, 0, -1, 0, -1});
  CHECK(capacity_slots(r, 2) == std::vector<std::int64_t>{0, 1, 0, 1, 0, 1});
  CHECK(capacity_slots(r, -1) == std::vector<std::int64_t>{0, 1, 0, 1, 0, 1});
  CHECK(capacity_slots(r, 0) == std::vector<std::int64_t>(6, -1));
  // One choice each: tokens in order, the third of expert 0 dropped, expert 1 untouched.
  Routing one{5, 2, 1, {0, 0, 0, 1, 0}, {1, 1, 1, 1, 1}};
  CHECK(capacity_slots(one, 2) == std::vector<std::int64_t>{0, 1, -1, 0, -1});
  CHECK(capacity_slots(one, -1) == std::vector<std::int64_t>{0, 1, 2, 0, 3});
  // Dropless with k = 2: a token's second choices are numbered after every first choice.
  Routing late{3, 2, 2, {1, 0, 1, 0, 0, 1}, std::vector<double>(6, 0.5)};
  CHECK(capacity_slots(late, -1) == std::vector<std::int64_t>{0, 1, 1, 2, 0, 2});
  CHECK(capacity_slots(late, 2) == std::vector<std::int64_t>{0, 1, 1, -1, 0, -1});
  // N = 0: nothing to place.
  CHECK(capacity_slots(Routing{0, 4, 2, {}, {}}, 3).empty());
  using testing::contains;
  using testing::error_of;
  CHECK(contains(error_of([&] { capacity_slots(r, -2); }), "capacity = -2"));
  Routing wrong = r;
  wrong.expert[3] = 3;
  CHECK(contains(error_of([&] { capacity_slots(wrong, 1); }), "expert 3"));
}

TEST_CASE("task1: route_top_k and capacity_slots on random routers, with and without a bias, "
          "equal the rules' second implementation", "[16_moe][task1][points:2]") {
  const std::int64_t N = 300;
  for (const std::int64_t E : {4, 8}) {
    for (std::int64_t k = 1; k <= 3; ++k) {
      const std::vector<double> p =
          routing_test::tied_probs(N, E, 3, static_cast<unsigned>(E * 10 + k));
      std::vector<double> bias(E);
      for (std::int64_t e = 0; e < E; ++e) bias[e] = 0.0625 * static_cast<double>(e % 3);
      for (const bool with_bias : {false, true}) {
        INFO("E = " << E << ", k = " << k << (with_bias ? ", with a bias" : ", no bias"));
        const std::vector<double> b = with_bias ? bias : std::vector<double>{};
        const Routing got = route_top_k(Tensor::from_vector(p, {N, E}), k, b);
        const Routing want = routing_test::arg_max_routing(p, N, E, k, b);
        REQUIRE(got.expert == want.expert);
        REQUIRE(got.weight.size() == want.weight.size());
        for (std::size_t c = 0; c < want.weight.size(); ++c)
          REQUIRE(got.weight[c] == Approx(want.weight[c]).epsilon(1e-14).margin(1e-300));
        for (const double factor : {0.5, 1.0, 1.25, 0.0}) {
          const std::int64_t capacity = expert_capacity(N, k, E, factor);
          INFO("capacity factor " << factor << ": capacity " << capacity);
          REQUIRE(capacity_slots(want, capacity) == routing_test::ranked_slots(want, capacity));
        }
        REQUIRE(capacity_slots(want, 0) == std::vector<std::int64_t>(N * k, -1));
        REQUIRE(capacity_slots(want, 1) == routing_test::ranked_slots(want, 1));
      }
    }
  }
}

TEST_CASE("task1: route_top_k reads f32 probs on the GPU: the same choices and weights as the "
          "CPU", "[16_moe][task1][points:1][gpu]") {
  const std::int64_t N = 64, E = 8, k = 2;
  const std::vector<double> p = routing_test::tied_probs(N, E, 4, 901);
  const Tensor cpu = Tensor::from_vector(p, {N, E}).to(DType::f32);
  const std::vector<double> bias = {0.0, 0.125, 0.0, -0.125, 0.25, 0.0, 0.0, 0.0};
  const Routing want = route_top_k(cpu, k, bias);
  const Routing got = route_top_k(cpu.to(Device::cuda(0)), k, bias);
  // The CPU's choices are the definition's (a function that computes nothing agrees with
  // itself on both devices).
  CHECK(want.expert ==
        routing_test::arg_max_routing(cpu.to_vector<double>(), N, E, k, bias).expert);
  CHECK(got.expert == want.expert);
  CHECK(got.weight == want.weight);
  CHECK(capacity_slots(got, expert_capacity(N, k, E, 1.0)) ==
        routing_test::ranked_slots(want, expert_capacity(N, k, E, 1.0)));
}
