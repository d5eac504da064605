// Lesson 11, task 1: which features a rank holds, and where it sits in a tp x dp grid.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <set>
#include <string>

#include "mgpu/parallel/tp/tensor_parallel.h"

namespace tpar = mgpu::parallel::tp;  // tensor parallelism: lesson 11 writes its layers
using tpar::ShardRange;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mgpu::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("task1: shard_range cuts as torch.tensor_split does", "[11_tensor_parallel][task1][points:2]") {
  CHECK(tpar::shard_range(10, 3, 0) == ShardRange{0, 4});
  CHECK(tpar::shard_range(10, 3, 1) == ShardRange{4, 7});
  CHECK(tpar::shard_range(10, 3, 2) == ShardRange{7, 10});
  CHECK(tpar::shard_range(8, 2, 1) == ShardRange{4, 8});
  CHECK(tpar::shard_range(5, 1, 0) == ShardRange{0, 5});
  CHECK(tpar::shard_range(3, 3, 2) == ShardRange{2, 3});
  CHECK(tpar::shard_range(256, 3, 0) == ShardRange{0, 86});   // lesson's MLP over 3 ranks
  CHECK(tpar::shard_range(256, 3, 2) == ShardRange{171, 256});
}

TEST_CASE("task1: the shards tile the features, the first ones one longer",
          "[11_tensor_parallel][task1][points:2]") {
  for (std::int64_t total = 1; total <= 20; ++total) {
    for (int parts = 1; parts <= std::min<std::int64_t>(total, 7); ++parts) {
      INFO(total << " features over " << parts);
      std::int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const ShardRange r = tpar::shard_range(total, parts, i);
        CHECK(r.begin == next);
        CHECK(r.size() == total / parts + (i < total % parts ? 1 : 0));
        next = r.end;
      }
      CHECK(next == total);
    }
  }
}

TEST_CASE("shard_range refuses cuts that leave a shard empty", "[11_tensor_parallel]") {
  CHECK_THAT(error_of([] { tpar::shard_range(2, 3, 0); }), Catch::Contains("2 features"));
  CHECK_THAT(error_of([] { tpar::shard_range(4, 2, 2); }), Catch::Contains("shard 2 of 2"));
  CHECK_THAT(error_of([] { tpar::shard_range(4, 0, 0); }), Catch::Contains("0 non-empty"));
}

TEST_CASE("task1: grid_position, 4 ranks as 2 x 2 and 6 ranks as 3 x 2",
          "[11_tensor_parallel][task1][points:2]") {
  const tpar::GridPosition p = tpar::grid_position(4, 2, 3);
  CHECK(p.tp_rank == 1);
  CHECK(p.dp_rank == 1);
  CHECK(p.tp_group == std::vector<int>{2, 3});
  CHECK(p.dp_group == std::vector<int>{1, 3});
  const tpar::GridPosition q = tpar::grid_position(6, 3, 4);
  CHECK(q.tp_rank == 1);
  CHECK(q.dp_rank == 1);
  CHECK(q.tp_group == std::vector<int>{3, 4, 5});
  CHECK(q.dp_group == std::vector<int>{1, 4});
  const tpar::GridPosition pure_dp = tpar::grid_position(3, 1, 2);
  CHECK(pure_dp.tp_group == std::vector<int>{2});
  CHECK(pure_dp.dp_group == std::vector<int>{0, 1, 2});
  const tpar::GridPosition pure_tp = tpar::grid_position(3, 3, 2);
  CHECK(pure_tp.tp_group == std::vector<int>{0, 1, 2});
  CHECK(pure_tp.dp_group == std::vector<int>{2});
}

TEST_CASE("task1: every rank is in one tp group and one dp group, which meet in that rank alone",
          "[11_tensor_parallel][task1][points:2]") {
  for (int world = 1; world <= 8; ++world) {
    for (int tp = 1; tp <= world; ++tp) {
      if (world % tp) continue;
      INFO("world " << world << ", tp " << tp);
      std::set<std::vector<int>> tp_groups, dp_groups;
      for (int r = 0; r < world; ++r) {
        const tpar::GridPosition p = tpar::grid_position(world, tp, r);
        REQUIRE(p.tp_group.size() == static_cast<std::size_t>(tp));
        REQUIRE(p.dp_group.size() == static_cast<std::size_t>(world / tp));
        CHECK(p.tp_group[p.tp_rank] == r);  // the group rank indexes the sorted list
        CHECK(p.dp_group[p.dp_rank] == r);
        int common = 0;  // the two groups share exactly one rank: r
        for (int a : p.tp_group)
          for (int b : p.dp_group)
            if (a == b) common += a == r ? 1 : 100;
        CHECK(common == 1);
        // The tp group's ranks are consecutive: they share a node.
        CHECK(p.tp_group.back() - p.tp_group.front() == tp - 1);
        tp_groups.insert(p.tp_group);
        dp_groups.insert(p.dp_group);
      }
      CHECK(tp_groups.size() == static_cast<std::size_t>(world / tp));
      CHECK(dp_groups.size() == static_cast<std::size_t>(tp));
    }
  }
}

TEST_CASE("grid_position refuses a tp that does not divide the world", "[11_tensor_parallel]") {
  CHECK_THAT(error_of([] { tpar::grid_position(6, 4, 0); }), Catch::Contains("--tp must divide"));
  CHECK_THAT(error_of([] { tpar::grid_position(4, 2, 4); }), Catch::Contains("rank 4"));
}
