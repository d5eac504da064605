// Debug mode: ranks compare each collective before running it.
#include <catch2/catch.hpp>

#include "dist_test_util.h"

using namespace mgpu;
using mgpu::testing::make_tensor;
using mgpu::testing::values_of;

TEST_CASE("debug mode names a shape mismatch on every rank and skips the op", "[dist][debug]") {
  dist::GroupOptions o;
  o.announce = false;
  o.debug = 1;
  auto g = dist::new_group("mpi", Device::cpu(), o);
  Tensor same = make_tensor({1.0, 2.0}, DType::f32);
  g->all_reduce(same).wait();  // matching collectives pass the check
  CHECK(values_of(same) == std::vector<double>{1.0 * g->size(), 2.0 * g->size()});
  if (g->size() < 2) return;

  // The last rank's tensor has one element more: every rank gets the same error.
  const bool odd_one = g->rank() == g->size() - 1;
  Tensor t = make_tensor(std::vector<double>(odd_one ? 11 : 10, 1.0), DType::f32);
  std::string expected = "rank " + std::to_string(g->size() - 1) + " issued all_reduce #2 f32[11]";
  CHECK_THROWS_WITH(g->all_reduce(t).wait(),
                    Catch::Contains("disagree on collective #2") &&
                        Catch::Contains("rank 0 issued all_reduce #2 f32[10]") &&
                        Catch::Contains(expected));
  CHECK(values_of(t) == std::vector<double>(odd_one ? 11 : 10, 1.0));  // not run

  // A different op with the same shape is named too, and the group still works afterwards.
  Tensor u = make_tensor({3.0}, DType::f32);
  dist::Work w = odd_one ? g->broadcast(u, 0) : g->all_reduce(u);
  CHECK_THROWS_WITH(w.wait(), Catch::Contains("broadcast #3"));
  g->barrier().wait();
  Tensor v = make_tensor({1.0}, DType::i64);
  g->all_reduce(v).wait();
  CHECK(values_of(v)[0] == g->size());
}
