// Lesson 16, task 4 in one process: the auxiliary loss and its gradient, and the bias update.
#include <catch2/catch.hpp>

#include <vector>

#include "mgpu/parallel/moe/load_balance.h"

using namespace mgpu::parallel::moe;

TEST_CASE("task4: update_expert_bias raises the underloaded experts and lowers the overloaded "
          "ones by gamma", "[16_moe][task4][points:1]") {
  std::vector<double> bias = {0.0, 0.5, -0.25, 1.0};
  update_expert_bias(bias, {4, 1, 2, 1}, 0.125);  // mean load 2
  CHECK(bias == std::vector<double>{-0.125, 0.625, -0.25, 1.125});
}
