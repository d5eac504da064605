// Lesson 16, task 3 under mpirun (2, 3 and 4 ranks): the counts, and the rows to the
// experts' ranks and back.
#include <catch2/catch.hpp>

#include <vector>

#include "groups.h"
#include "mgpu/parallel/moe/expert_exchange.h"

using namespace mgpu;
using namespace mgpu::parallel::moe;
using mgpu::testing::group;

TEST_CASE("task3: exchange_counts tells each rank how many rows each rank sends to each of "
          "its experts", "[16_moe][task3][points:2]") {
  const int P = group().size(), r = group().rank();
  DispatchPlan plan;
  plan.experts = 2 * P;
  plan.ep_size = P;
  // Rank r sends r + e + 1 rows to expert e.
  for (int e = 0; e < 2 * P; ++e) plan.tokens_per_expert.push_back(r + e + 1);
  const ExpertExchange ex = exchange_counts(plan, group());
  CHECK(ex.local_experts == 2);
  REQUIRE(ex.recv_counts.size() == static_cast<std::size_t>(2 * P));
  for (int q = 0; q < P; ++q)
    for (int l = 0; l < 2; ++l) CHECK(ex.recv_counts[q * 2 + l] == q + (2 * r + l) + 1);
}
