// Lesson 16, task 2 in one process: the dispatch plan, integer-exact: hand cases, and random
// routings against a second implementation (the kept choices stable-sorted by expert, then
// slot; the counts tallied from that order).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "expect_error.h"
#include "mgpu/parallel/moe/dispatch_plan.h"

using namespace mgpu::parallel::moe;

namespace plan_test {

/// A random routing: each token's k distinct experts in random order, from Catch's
/// --rng-seed; the weights are not looked at by the plan.
inline Routing random_routing(std::int64_t N, std::int64_t E, std::int64_t k, unsigned salt) {
  std::mt19937 gen(Catch::rngSeed() * 104729u + salt);
  Routing r{N, E, k, std::vector<std::int32_t>(N * k), std::vector<double>(N * k, 1.0 / k)};
  std::vector<std::int32_t> experts(E);
  for (std::int64_t n = 0; n < N; ++n) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), gen);
    std::copy(experts.begin(), experts.begin() + k, r.expert.begin() + n * k);
  }
  return r;
}

/// Slots by the priority rule (first choices of every token in order, then the second ones,
/// ...), written here so that the plan's tests stand on their own.
inline std::vector<std::int64_t> priority_slots(const Routing& r, std::int64_t capacity) {
  std::vector<std::int64_t> slots(r.tokens * r.k, -1), filled(r.experts, 0);
  for (std::int64_t j = 0; j < r.k; ++j)
    for (std::int64_t n = 0; n < r.tokens; ++n) {
      const std::int64_t c = n * r.k + j;
      if (capacity < 0 || filled[r.expert[c]] < capacity) slots[c] = filled[r.expert[c]]++;
    }
  return slots;
}

/// The plan by sorting: the kept choices stable-sorted by (expert, slot); the counts
/// tallied from that order.
inline DispatchPlan sorted_plan(const Routing& r, const std::vector<std::int64_t>& slots,
                                int P) {
  DispatchPlan plan;
  plan.experts = r.experts;
  plan.ep_size = P;
  for (std::int64_t c = 0; c < r.tokens * r.k; ++c)
    if (slots[c] >= 0) plan.order.push_back(c);
  std::stable_sort(plan.order.begin(), plan.order.end(), [&](std::int64_t a, std::int64_t b) {
    return r.expert[a] != r.expert[b] ? r.expert[a] < r.expert[b] : slots[a] < slots[b];
  });
  plan.tokens_per_expert.assign(r.experts, 0);
  plan.send_counts.assign(P, 0);
  const std::int64_t L = r.experts / P;
  for (const std::int64_t c : plan.order) {
    ++plan.tokens_per_expert[r.expert[c]];
    ++plan.send_counts[r.expert[c] / L];
  }
  return plan;
}

}  // namespace plan_test

TEST_CASE("task2: make_dispatch_plan sorts the kept choices by expert, then slot, and counts "
          "them per expert and per rank", "[16_moe][task2][points:1]") {
  Routing r;
  r.tokens = 3;
  r.experts = 4;
  r.k = 2;
  r.expert = {3, 0, 0, 1, 3, 2};
  r.weight = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  const std::vector<std::int64_t> slots = {0, 0, 1, 0, 1, 0};
  const DispatchPlan plan = make_dispatch_plan(r, slots, 2);
  CHECK(plan.experts == 4);
  CHECK(plan.ep_size == 2);
  CHECK(plan.order == std::vector<std::int64_t>{1, 2, 3, 5, 0, 4});
  CHECK(plan.tokens_per_expert == std::vector<std::int64_t>{2, 1, 1, 2});
  CHECK(plan.send_counts == std::vector<std::int64_t>{3, 3});
  // The slots of the priority rule: token 1's first choice (choice 2) has expert 0's slot 0,
  // token 0's second choice (choice 1) slot 1, so within expert 0 slot order is not token
  // order.
  const DispatchPlan ranked = make_dispatch_plan(r, {0, 1, 0, 0, 1, 0}, 2);
  CHECK(ranked.order == std::vector<std::int64_t>{2, 1, 3, 5, 0, 4});
  CHECK(ranked.tokens_per_expert == std::vector<std::int64_t>{2, 1, 1, 2});
  CHECK(ranked.send_counts == std::vector<std::int64_t>{3, 3});
}

TEST_CASE("task2: expert_owner gives each rank E/P consecutive experts and refuses a P that "
          "does not divide E", "[16_moe][task2][points:1]") {
  using mgpu::testing::contains;
  using mgpu::testing::error_of;
  for (std::int64_t e = 0; e < 8; ++e) {
    INFO("expert " << e);
    CHECK(expert_owner(e, 8, 1) == 0);
    CHECK(expert_owner(e, 8, 2) == e / 4);
    CHECK(expert_owner(e, 8, 4) == e / 2);
    CHECK(expert_owner(e, 8, 8) == e);
  }
  CHECK(expert_owner(5, 6, 3) == 2);
  CHECK(expert_owner(2, 6, 3) == 1);
  CHECK(contains(error_of([] { expert_owner(0, 8, 3); }), "EP group of 3"));
  CHECK(contains(error_of([] { expert_owner(0, 8, 0); }), "EP group of 0"));
  CHECK(contains(error_of([] { expert_owner(8, 8, 2); }), "expert 8"));
  CHECK(contains(error_of([] { expert_owner(-1, 8, 2); }), "expert -1"));
}

TEST_CASE("task2: make_dispatch_plan leaves dropped choices out, gives an idle rank a count of "
          "0, and refuses slots of the wrong length or a P that does not divide E",
          "[16_moe][task2][points:1]") {
  using mgpu::testing::contains;
  using mgpu::testing::error_of;
  // Capacity 1: token 0's second choice (expert 0), token 1's second (expert 1) and both of
  // token 2's are dropped.
  const Routing r{3, 4, 2, {1, 0, 0, 1, 1, 0}, std::vector<double>(6, 0.5)};
  const std::vector<std::int64_t> slots = {0, -1, 0, -1, -1, -1};
  const DispatchPlan two = make_dispatch_plan(r, slots, 2);
  CHECK(two.order == std::vector<std::int64_t>{2, 0});
  CHECK(two.tokens_per_expert == std::vector<std::int64_t>{1, 1, 0, 0});
  CHECK(two.send_counts == std::vector<std::int64_t>{2, 0});
  const DispatchPlan four = make_dispatch_plan(r, slots, 4);
  CHECK(four.order == std::vector<std::int64_t>{2, 0});
  CHECK(four.send_counts == std::vector<std::int64_t>{1, 1, 0, 0});
  // Everything dropped: an empty plan with every count 0.
  const DispatchPlan none = make_dispatch_plan(r, std::vector<std::int64_t>(6, -1), 1);
  CHECK(none.order.empty());
  CHECK(none.tokens_per_expert == std::vector<std::int64_t>{0, 0, 0, 0});
  CHECK(none.send_counts == std::vector<std::int64_t>{0});
  CHECK(contains(error_of([&] { make_dispatch_plan(r, slots, 3); }), "EP group of 3"));
  CHECK(contains(error_of([&] { make_dispatch_plan(r, {0, 0, 0}, 2); }), "3 slots"));
}

TEST_CASE("task2: make_dispatch_plan on random routings, dropless and with capacity, over "
          "every P that divides E, equals a stable sort by (expert, slot)",
          "[16_moe][task2][points:2]") {
  const std::int64_t N = 257;
  for (const std::int64_t E : {4, 6, 12}) {
    for (std::int64_t k = 1; k <= 3; ++k) {
      const Routing r = plan_test::random_routing(N, E, k, static_cast<unsigned>(E * 10 + k));
      for (const std::int64_t capacity : {std::int64_t{-1}, std::int64_t{0}, N * k / E / 2,
                                          N * k / E, N * k / E + 7}) {
        const std::vector<std::int64_t> slots = plan_test::priority_slots(r, capacity);
        for (int P = 1; P <= E; ++P) {
          if (E % P != 0) continue;
          INFO("E = " << E << ", k = " << k << ", capacity " << capacity << ", P = " << P);
          const DispatchPlan got = make_dispatch_plan(r, slots, P);
          const DispatchPlan want = plan_test::sorted_plan(r, slots, P);
          REQUIRE(got.experts == E);
          REQUIRE(got.ep_size == P);
          REQUIRE(got.order == want.order);
          REQUIRE(got.tokens_per_expert == want.tokens_per_expert);
          REQUIRE(got.send_counts == want.send_counts);
        }
      }
    }
  }
}
