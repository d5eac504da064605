// Lesson 16, task 1 in one process: the router's top-k and the capacity slots, integer-exact
// against the stated rules.
#include <catch2/catch.hpp>

#include <vector>

#include "mgpu/parallel/moe/routing.h"

using namespace mgpu;
using namespace mgpu::parallel::moe;

TEST_CASE("task1: route_top_k picks the k best experts, best first, and renormalises their "
          "probabilities", "[16_moe][task1][points:2]") {
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
