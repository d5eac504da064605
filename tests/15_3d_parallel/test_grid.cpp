// Lesson 15, task 1 in one process: the grid's coordinates and groups, on every rank of
// every grid of up to 16 ranks, against the definition (rank = tp + TP·(cp + CP·(dp +
// DP·pp)); a group along an axis is the ranks that share the other three coordinates).
#include <catch2/catch.hpp>

#include <algorithm>
#include <iterator>
#include <set>
#include <vector>

#include "mgpu/parallel/grid/grid.h"

using namespace mgpu::parallel::grid;

namespace {

// Every shape with at most `max_ranks` ranks.
std::vector<GridShape> shapes(int max_ranks) {
  std::vector<GridShape> out;
  for (int dp = 1; dp <= max_ranks; ++dp)
    for (int tp = 1; dp * tp <= max_ranks; ++tp)
      for (int pp = 1; dp * tp * pp <= max_ranks; ++pp)
        for (int cp = 1; dp * tp * pp * cp <= max_ranks; ++cp)
          out.push_back(GridShape{dp, tp, pp, cp});
  return out;
}

}  // namespace

TEST_CASE("task1: grid_coords and grid_rank: TP innermost, then CP, then DP, PP outermost, "
          "each the other's inverse", "[15_3d_parallel][task1][points:3]") {
  const GridShape s{2, 2, 2};
  CHECK(grid_coords(s, 0) == GridCoords{0, 0, 0});
  CHECK(grid_coords(s, 1) == GridCoords{0, 1, 0});
  CHECK(grid_coords(s, 2) == GridCoords{1, 0, 0});
  CHECK(grid_coords(s, 6) == GridCoords{1, 0, 1});
  CHECK(grid_coords(GridShape{1, 2, 4}, 5) == GridCoords{0, 1, 2});
  CHECK(grid_coords(GridShape{4, 2, 1}, 5) == GridCoords{2, 1, 0});
  CHECK(grid_rank(GridShape{3, 2, 2}, GridCoords{2, 1, 1}) == 1 + 2 * (2 + 3 * 1));
  // With a CP axis: between TP and DP.
  CHECK(grid_coords(GridShape{2, 2, 2, 2}, 3) == GridCoords{0, 1, 0, 1});
  CHECK(grid_coords(GridShape{2, 2, 2, 2}, 13) == GridCoords{1, 1, 1, 0});
  CHECK(grid_coords(GridShape{1, 1, 1, 4}, 2) == GridCoords{0, 0, 0, 2});
  CHECK(grid_rank(GridShape{2, 2, 1, 3}, GridCoords{1, 1, 0, 2}) == 1 + 2 * (2 + 3 * 1));
  for (const GridShape& shape : shapes(16)) {
    INFO(shape.str());
    std::set<std::vector<int>> places;
    for (int r = 0; r < shape.size(); ++r) {
      const GridCoords c = grid_coords(shape, r);
      REQUIRE(c.dp >= 0);
      REQUIRE(c.dp < shape.dp);
      REQUIRE(c.tp >= 0);
      REQUIRE(c.tp < shape.tp);
      REQUIRE(c.pp >= 0);
      REQUIRE(c.pp < shape.pp);
      REQUIRE(c.cp >= 0);
      REQUIRE(c.cp < shape.cp);
      REQUIRE(c.tp + shape.tp * (c.cp + shape.cp * (c.dp + shape.dp * c.pp)) == r);
      REQUIRE(grid_rank(shape, c) == r);
      places.insert({c.dp, c.tp, c.pp, c.cp});
    }
    CHECK(static_cast<int>(places.size()) == shape.size());
  }
  CHECK_THROWS(grid_coords(s, 8));
  CHECK_THROWS(grid_coords(s, -1));
  CHECK_THROWS(grid_rank(s, GridCoords{0, 2, 0}));
  CHECK_THROWS(grid_rank(s, GridCoords{0, 0, 0, 1}));
}

TEST_CASE("task1: axis_group: the ranks sharing the other three coordinates, ascending; each "
          "rank's groups meet in it alone", "[15_3d_parallel][task1][points:3]") {
  const GridShape s{2, 2, 2};
  CHECK(axis_group(s, Axis::tp, 5) == std::vector<int>{4, 5});
  CHECK(axis_group(s, Axis::dp, 5) == std::vector<int>{5, 7});
  CHECK(axis_group(s, Axis::pp, 5) == std::vector<int>{1, 5});
  CHECK(axis_group(GridShape{1, 2, 4}, Axis::pp, 3) == std::vector<int>{1, 3, 5, 7});
  CHECK(axis_group(GridShape{4, 2, 1}, Axis::dp, 0) == std::vector<int>{0, 2, 4, 6});
  CHECK(axis_group(GridShape{1, 2, 1, 2}, Axis::cp, 1) == std::vector<int>{1, 3});
  CHECK(axis_group(GridShape{2, 2, 1, 2}, Axis::dp, 2) == std::vector<int>{2, 6});
  CHECK(axis_group(GridShape{2, 2, 1, 2}, Axis::cp, 5) == std::vector<int>{5, 7});
  for (const GridShape& shape : shapes(16)) {
    INFO(shape.str());
    for (Axis axis : kAxes) {
      INFO("axis " << axis_name(axis));
      for (int r = 0; r < shape.size(); ++r) {
        const std::vector<int> g = axis_group(shape, axis, r);
        REQUIRE(static_cast<int>(g.size()) == shape.extent(axis));
        REQUIRE(std::is_sorted(g.begin(), g.end()));
        const GridCoords me = grid_coords(shape, r);
        for (int i = 0; i < static_cast<int>(g.size()); ++i) {
          const GridCoords c = grid_coords(shape, g[static_cast<std::size_t>(i)]);
          REQUIRE(c.along(axis) == i);
          for (Axis other : kAxes)
            if (other != axis) REQUIRE(c.along(other) == me.along(other));
        }
      }
      // The groups along an axis tile the ranks (axis_groups checks it, built on axis_group).
      const auto groups = axis_groups(shape, axis);
      CHECK(static_cast<int>(groups.size()) == shape.size() / shape.extent(axis));
    }
    for (int r = 0; r < shape.size(); ++r)  // two groups of one rank meet in it alone
      for (Axis x : kAxes)
        for (Axis y : kAxes) {
          if (x == y) continue;
          const auto a = axis_group(shape, x, r), b = axis_group(shape, y, r);
          std::vector<int> ab;
          std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(ab));
          REQUIRE(ab == std::vector<int>{r});
        }
  }
}
