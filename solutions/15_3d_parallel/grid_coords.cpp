// Task 1: the grid's coordinates and groups. Every rank of a DP x CP x TP x PP job must
// agree on who is where: which ranks share its layer shards (TP), which share its sequences
// (CP), which hold the same weights and read other batches (DP), which run the other stages
// of its pipeline (PP).
#include "mgpu/parallel/grid/grid.h"

#include "mgpu/error.h"

namespace mgpu::parallel::grid {

GridCoords grid_coords(const GridShape& shape, int rank) {
  MGPU_CHECK(shape.dp >= 1 && shape.tp >= 1 && shape.pp >= 1 && shape.cp >= 1, "grid_coords: ",
             shape.str(), " has an extent below 1");
  MGPU_CHECK(rank >= 0 && rank < shape.size(), "grid_coords: rank ", rank, " is not in ",
             shape.str(), " (ranks 0..", shape.size() - 1, ")");
  GridCoords c;
  // What you have: shape (its extents cp, dp, pp, tp; extent(axis); size()), rank; c
  // (GridCoords: cp, dp, pp, tp).
  // TODO(task1) BEGIN: chapter §1's numbering: rank's place in the grid, TP innermost (a
  // TP group is TP consecutive ranks), then CP, then DP, then PP outermost. Each
  // coordinate in [0, extent); DP 2 x TP 2 x PP 2: rank 6 is dp 1, tp 0, pp 1, cp 0.
  // Stuck: tools/hint 15 1 (about 4 lines).
  c.tp = rank % shape.tp;
  c.cp = (rank / shape.tp) % shape.cp;
  c.dp = (rank / (shape.tp * shape.cp)) % shape.dp;
  c.pp = rank / (shape.tp * shape.cp * shape.dp);
  // TODO(task1) END
  return c;
}

int grid_rank(const GridShape& shape, const GridCoords& coords) {
  MGPU_CHECK(coords.dp >= 0 && coords.dp < shape.dp && coords.tp >= 0 && coords.tp < shape.tp &&
                 coords.pp >= 0 && coords.pp < shape.pp && coords.cp >= 0 && coords.cp < shape.cp,
             "grid_rank: (dp ", coords.dp, ", tp ", coords.tp, ", pp ", coords.pp, ", cp ",
             coords.cp, ") is outside ", shape.str());
  // What you have: shape, coords (each inside the grid).
  // TODO(task1) BEGIN: the rank at coords, the inverse of grid_coords:
  // grid_coords(shape, grid_rank(shape, c)) == c for every c of the grid. Stuck:
  // tools/hint 15 1 (1 line).
  return coords.tp + shape.tp * (coords.cp + shape.cp * (coords.dp + shape.dp * coords.pp));
  // TODO(task1) END
}

std::vector<int> axis_group(const GridShape& shape, Axis axis, int rank) {
  const GridCoords me = grid_coords(shape, rank);
  std::vector<int> members;
  // What you have: axis (Axis::cp, Axis::dp, Axis::pp or Axis::tp); members; me (rank's
  // place, GridCoords' fields cp, dp, pp, tp); grid_coords(shape, rank); grid_rank(shape,
  // coords); shape.extent(axis).
  // TODO(task1) BEGIN: chapter §1's groups: the ranks that share rank's other three
  // coordinates, in ascending order (coordinate i along the axis is group rank i), as many
  // as the extent along the axis; rank itself among them. Stuck: tools/hint 15 1
  // (about 9 lines).
  for (int i = 0; i < shape.extent(axis); ++i) {
    GridCoords c = me;
    switch (axis) {
      case Axis::tp: c.tp = i; break;
      case Axis::dp: c.dp = i; break;
      case Axis::pp: c.pp = i; break;
      case Axis::cp: c.cp = i; break;
    }
    members.push_back(grid_rank(shape, c));
  }
  // TODO(task1) END
  return members;
}

}  // namespace mgpu::parallel::grid
