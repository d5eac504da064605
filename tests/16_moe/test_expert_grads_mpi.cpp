// Lesson 16, task 5 under mpirun (2, 3 and 4 ranks): the EP × DP gradient groups.
#include <catch2/catch.hpp>

#include <vector>

#include "groups.h"
#include "mgpu/parallel/moe/expert_grads.h"

using namespace mgpu::parallel::moe;
using mgpu::testing::group;

TEST_CASE("task5: with one EP group over the world, each expert lives on one rank",
          "[16_moe][task5][points:1]") {
  const int P = group().size(), r = group().rank();
  const ExpertGradGroups g = expert_grad_groups(P, P, r);
  CHECK(g.expert.ranks == std::vector<int>{r});
  CHECK(g.dense.ranks.size() == static_cast<std::size_t>(P));
}
