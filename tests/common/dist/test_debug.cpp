// Debug mode: ranks compare each collective before running it.
#include <catch2/catch.hpp>

#include "dist_test_util.h"

using namespace mgpu;
using mgpu::testing::make_tensor;
using mgpu::testing::options_with_debug;
using mgpu::testing::values_of;

TEST_CASE("debug mode names a shape mismatch on every rank and skips the op", "[dist][debug]") {
  const dist::GroupOptions o = options_with_debug(1);
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

TEST_CASE("debug mode names collectives issued on two groups in different orders",
          "[dist][debug]") {
  // Two groups over the same ranks (a training group and a logging group, say). The last
  // rank issues on B first, the others on A first: no rank waits in between, so the mpi
  // backend would run both, but nccl runs a rank's collectives one after another on one
  // stream and would hang. The check compares, at each op, how many each rank had issued on
  // the other group before it.
  const dist::GroupOptions o = options_with_debug(1);
  auto a = dist::new_group("mpi", Device::cpu(), o);
  auto b = dist::new_group("mpi", Device::cpu(), o);
  if (a->size() < 2) return;
  const int last = a->size() - 1;
  const bool odd_one = a->rank() == last;
  Tensor x = make_tensor({1.0, 2.0}, DType::f32), y = make_tensor({3.0}, DType::f32);
  dist::Work on_a, on_b;
  if (odd_one) {
    on_b = b->all_reduce(y);
    on_a = a->all_reduce(x);
  } else {
    on_a = a->all_reduce(x);
    on_b = b->all_reduce(y);
  }
  const std::string different = "issued collectives on different groups in different orders";
  const std::string last_rank = "but rank " + std::to_string(last) + " had issued ";
  // Before A's op rank 0 had issued nothing on B and the last rank one; before B's the reverse.
  CHECK_THROWS_WITH(on_a.wait(), Catch::Contains(different) &&
                                     Catch::Contains("before all_reduce #1 f32[2] op=sum (mpi)") &&
                                     Catch::Contains("rank 0 had issued 0 collective(s) on group") &&
                                     Catch::Contains(last_rank + "1."));
  CHECK_THROWS_WITH(on_b.wait(), Catch::Contains(different) &&
                                     Catch::Contains("before all_reduce #1 f32[1] op=sum (mpi)") &&
                                     Catch::Contains("rank 0 had issued 1 collective(s) on group") &&
                                     Catch::Contains(last_rank + "0."));
  CHECK(values_of(x) == std::vector<double>{1.0, 2.0});  // neither op was run
  CHECK(values_of(y) == std::vector<double>{3.0});

  // Issued in one order, the same collectives pass on both groups.
  a->all_reduce(x).wait();
  b->all_reduce(y).wait();
  CHECK(values_of(x) == std::vector<double>{1.0 * a->size(), 2.0 * a->size()});
  CHECK(values_of(y) == std::vector<double>{3.0 * a->size()});
}

TEST_CASE("debug mode: collectives on a sub-group do not count against its non-members",
          "[dist][debug][subgroup]") {
  // Ranks 0 and 1 all-reduce on their pair first, then everyone on the world group. Ranks
  // outside the pair issued nothing there, and that is no divergence.
  const dist::GroupOptions o = options_with_debug(1);
  auto world = dist::new_group("mpi", Device::cpu(), o);
  if (world->size() < 2) return;
  auto pair = dist::new_group({0, 1}, "mpi", Device::cpu(), o);
  Tensor x = make_tensor({1.0}, DType::f32), y = make_tensor({1.0}, DType::f32);
  if (pair) pair->all_reduce(x).wait();
  world->all_reduce(y).wait();
  CHECK(values_of(x)[0] == (pair ? 2.0 : 1.0));
  CHECK(values_of(y)[0] == world->size());
}
