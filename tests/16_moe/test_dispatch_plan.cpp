// Lesson 16, task 2 in one process: the dispatch plan, integer-exact.
#include <catch2/catch.hpp>

#include <vector>

#include "mgpu/parallel/moe/dispatch_plan.h"

using namespace mgpu::parallel::moe;

TEST_CASE("task2: make_dispatch_plan sorts the kept choices by expert, then slot, and counts "
          "them per expert and per rank", "[16_moe][task2][points:2]") {
  Routing r;
  r.tokens = 3;
  r.experts = 4;
  r.k = 2;
  r.expert = {3, 0, 0, 1, 3, 2};
  r.weight = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  const std::vector<std::int64_t> slots = {0, 0, 1, 0, 1, 0};
  const DispatchPlan plan = make_dispatch_plan(r, slots, 2);
  CHECK(plan.order == std::vector<std::int64_t>{1, 2, 3, 5, 0, 4});
  CHECK(plan.tokens_per_expert == std::vector<std::int64_t>{2, 1, 1, 2});
  CHECK(plan.send_counts == std::vector<std::int64_t>{3, 3});
}
