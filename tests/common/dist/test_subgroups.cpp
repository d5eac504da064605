// new_group(ranks): groups over some ranks of the world (tensor and data parallelism run on
// such groups), and the collective count every group keeps. Every rank runs every case,
// members or not, since creating a group is collective over the world.
#include <catch2/catch.hpp>

#include <numeric>

#include "dist_test_util.h"

using namespace mgpu;
using mgpu::testing::values_of;

using mgpu::testing::options_with_debug;

namespace {

// A tensor holding `value` n times.
Tensor filled(std::int64_t n, double value) {
  return Tensor::from_vector(std::vector<double>(static_cast<std::size_t>(n), value), {n});
}

// The world cut into consecutive blocks of `block` ranks (the last may be shorter).
std::vector<std::vector<int>> blocks_of(int block) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < dist::world_size(); ++r) {
    if (r % block == 0) out.emplace_back();
    out.back().push_back(r);
  }
  return out;
}

}  // namespace

TEST_CASE("new_group: the even ranks form a group; the others get none", "[dist][subgroup]") {
  const int world = dist::world_size(), me = dist::rank();
  std::vector<int> evens;
  for (int r = 0; r < world; r += 2) evens.push_back(r);
  auto g = dist::new_group(evens, "mpi", Device::cpu(), options_with_debug());
  if (me % 2 == 1) {
    CHECK(g == nullptr);
    return;
  }
  REQUIRE(g != nullptr);
  CHECK(g->size() == static_cast<int>(evens.size()));
  CHECK(g->rank() == me / 2);
  // The sum runs over the members alone: 0 + 2 + 4 ... (+1 each so rank 0 counts).
  Tensor t = filled(5, me + 1);
  g->all_reduce(t).wait();
  double want = 0;
  for (int r : evens) want += r + 1;
  CHECK(values_of(t) == std::vector<double>(5, want));
  // Group ranks, not world ranks: broadcast from group rank size-1 (the highest even rank).
  Tensor b = filled(3, me);
  g->broadcast(b, g->size() - 1).wait();
  CHECK(values_of(b) == std::vector<double>(3, evens.back()));
}

TEST_CASE("new_group: ranks are sorted, so the group rank does not depend on the list's order",
          "[dist][subgroup]") {
  std::vector<int> all(static_cast<std::size_t>(dist::world_size()));
  std::iota(all.rbegin(), all.rend(), 0);  // world-1, ..., 1, 0
  auto g = dist::new_group(all, "mpi", Device::cpu(), options_with_debug());
  REQUIRE(g != nullptr);
  CHECK(g->rank() == dist::rank());
  CHECK(g->size() == dist::world_size());
}

TEST_CASE("new_group: disjoint groups run different collectives at the same time, also in "
          "debug mode", "[dist][subgroup]") {
  // Blocks of 2 ranks: {0,1} {2,3} ... with 3 ranks the last block is {2} alone. Each
  // block all-reduces a tensor of its own size, so a check that compared ops across
  // groups, or waited for ranks outside the group, would fail or hang here.
  for (int debug : {0, 1}) {
    CAPTURE(debug);
    const auto blocks = blocks_of(2);
    std::shared_ptr<dist::ProcessGroup> mine;
    std::size_t my_block = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (auto g = dist::new_group(blocks[i], "mpi", Device::cpu(), options_with_debug(debug))) {
        mine = g;
        my_block = i;
      }
    REQUIRE(mine != nullptr);
    CHECK(mine->size() == static_cast<int>(blocks[my_block].size()));
    const std::int64_t n = 3 + static_cast<std::int64_t>(my_block);
    for (int step = 0; step < 1 + static_cast<int>(my_block); ++step) {  // unequal counts too
      Tensor t = filled(n, dist::rank());
      mine->all_reduce(t).wait();
      double want = 0;
      for (int r : blocks[my_block]) want += r;
      CHECK(values_of(t) == std::vector<double>(static_cast<std::size_t>(n), want));
    }
  }
}

TEST_CASE("new_group: a group of one rank runs alone while the others wait elsewhere",
          "[dist][subgroup]") {
  auto solo = dist::new_group({dist::world_size() - 1}, "mpi", Device::cpu(), options_with_debug(1));
  if (dist::rank() == dist::world_size() - 1) {
    REQUIRE(solo != nullptr);
    Tensor t = filled(4, 7);
    solo->all_reduce(t).wait();
    solo->barrier().wait();
    CHECK(values_of(t) == std::vector<double>(4, 7));
  } else {
    CHECK(solo == nullptr);
  }
  mgpu::testing::cpu_group().barrier().wait();
}

TEST_CASE("new_group: a bad list of ranks is refused on every rank, with the reason",
          "[dist][subgroup]") {
  const int world = dist::world_size();
  auto message = [](const std::vector<int>& ranks) {
    try {
      dist::new_group(ranks, "mpi", Device::cpu(), options_with_debug());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message({}), Catch::Contains("empty"));
  CHECK_THAT(message({0, world}), Catch::Contains("rank " + std::to_string(world)) &&
                                      Catch::Contains("not a rank of this world"));
  CHECK_THAT(message({-1}), Catch::Contains("rank -1"));
  CHECK_THAT(message({0, 0}), Catch::Contains("listed twice"));
  // Nothing was left half-created: a good group still works afterwards.
  auto g = dist::new_group({0}, "mpi", Device::cpu(), options_with_debug());
  CHECK((g != nullptr) == (dist::rank() == 0));
}

TEST_CASE("collectives_issued counts a group's collectives, not its messages",
          "[dist][subgroup]") {
  auto g = dist::new_group("mpi", Device::cpu(), options_with_debug());
  CHECK(g->collectives_issued() == 0);
  Tensor t = filled(6, 1);
  g->all_reduce(t).wait();
  g->broadcast(t, 0).wait();
  g->barrier().wait();
  CHECK(g->collectives_issued() == 3);
  if (g->size() > 1) {  // a ring step: send right, receive from the left
    Tensor in = filled(6, 0);
    const int right = (g->rank() + 1) % g->size(), left = (g->rank() + g->size() - 1) % g->size();
    dist::wait_all({g->send(t, right), g->recv(in, left)});
  }
  CHECK(g->collectives_issued() == 3);
  // Each group counts its own: another group's ops do not show here.
  mgpu::testing::cpu_group().barrier().wait();
  CHECK(g->collectives_issued() == 3);
}
