/// @file grid.h
/// @brief The process grid of multi-dimensional parallelism: N = DP × CP × TP × PP ranks,
/// each with a place (dp, cp, tp, pp) and one group along each axis (Megatron-LM's rank
/// order).
///
/// Tensor parallelism is innermost: the TP ranks of a group are consecutive (on one node,
/// where the links are fastest), context parallelism next (lesson 14: the ranks that share
/// a sequence), data parallelism next, pipeline stages outermost:
///
///     rank = tp + TP · (cp + CP · (dp + DP · pp))
///
///   DP 2 × TP 2 × PP 2 on 8 ranks (CP 1):  stage 0: replica 0 = ranks {0, 1}, replica 1 = {2, 3}
///                                          stage 1: replica 0 = ranks {4, 5}, replica 1 = {6, 7}
///   TP groups {0,1} {2,3} {4,5} {6,7}; DP groups {0,2} {1,3} {4,6} {5,7};
///   PP groups (one pipeline each) {0,4} {1,5} {2,6} {3,7}.
///
/// The group along an axis holds the ranks that share the other three coordinates. A rank's
/// groups along two different axes meet in that rank alone. ProcessGrid creates every
/// group of every axis on every rank, in one order (dist::new_group is collective over the
/// world: a group created on only some ranks leaves the others waiting).
///
/// Lesson 15 defines grid_coords, grid_rank and axis_group (task 1,
/// lessons/15_3d_parallel/grid_coords.cpp); the library compiles their reference.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"

namespace mgpu::parallel::grid {

/// One dimension of the grid.
enum class Axis { tp, dp, pp, cp };
/// "tp", "dp", "pp" or "cp".
const char* axis_name(Axis axis);
/// The four axes, innermost first: tp, cp, dp, pp.
inline constexpr Axis kAxes[] = {Axis::tp, Axis::cp, Axis::dp, Axis::pp};

/// The grid's extent along each axis.
struct GridShape {
  int dp = 1;  ///< data-parallel replicas
  int tp = 1;  ///< ranks of a tensor-parallel group
  int pp = 1;  ///< pipeline stages
  int cp = 1;  ///< ranks of a context-parallel group (that share one sequence)
  int ep = 1;  ///< ranks of an expert-parallel group: consecutive ranks of a data group (EP
               ///< folds into the data axis, as Megatron-LM's expert parallelism does, so it
               ///< is no factor of size()); it divides DP · CP
  /// Ranks in the grid: dp · cp · tp · pp.
  int size() const { return dp * cp * tp * pp; }
  /// The extent along `axis`.
  int extent(Axis axis) const;
  /// "DP 2 x TP 2 x PP 2"; "DP 2 x CP 2 x TP 2 x PP 2" where CP is above 1; "DP 4 (EP 2)
  /// x TP 1 x PP 1" where EP is above 1.
  std::string str() const;
};

/// A rank's place in the grid: 0 <= dp < DP, 0 <= tp < TP, 0 <= pp < PP, 0 <= cp < CP.
struct GridCoords {
  int dp = 0;  ///< which replica (which part of the batch it reads)
  int tp = 0;  ///< which shard of each split layer it holds
  int pp = 0;  ///< which pipeline stage (which blocks) it runs
  int cp = 0;  ///< which positions of each sequence it holds
  /// The coordinate along `axis`.
  int along(Axis axis) const;
  /// Same place.
  bool operator==(const GridCoords& o) const {
    return dp == o.dp && tp == o.tp && pp == o.pp && cp == o.cp;
  }
};

// ---- Task 1: coordinates and groups (grid_coords.cpp) ----------------------------------------

/// The place of `rank` (0 <= rank < shape.size()) in the grid: the inverse of grid_rank.
/// Throws for a rank outside the grid or a shape with an extent below 1.
GridCoords grid_coords(const GridShape& shape, int rank);
/// The rank at `coords`: tp + TP · (cp + CP · (dp + DP · pp)). Throws for coordinates
/// outside the grid.
int grid_rank(const GridShape& shape, const GridCoords& coords);
/// The world ranks of `rank`'s group along `axis`: every rank that shares rank's other three
/// coordinates, ascending (so group rank i is coordinate i along the axis). Its size is the
/// extent along the axis.
std::vector<int> axis_group(const GridShape& shape, Axis axis, int rank);

// ---- The grid's groups (common/src/parallel/grid/process_grid.cpp) ---------------------------

/// Every group along `axis`, each as axis_group gives it, ordered by their smallest rank:
/// the order every rank creates them in.
std::vector<std::vector<int>> axis_groups(const GridShape& shape, Axis axis);

/// Checks that `shape` covers exactly `world` ranks and that EP divides DP · CP; one error
/// naming the shape otherwise.
void check_grid(const GridShape& shape, int world);

/// This rank's groups. Built collectively: every rank of the world constructs it with the
/// same shape, and every rank creates every group of every axis (TP's, then DP's, then
/// PP's, then CP's, each ordered by smallest rank), keeping the four it belongs to; where
/// CP is above 1, then also the data groups (see data_group()); where EP is above 1, then
/// the EP groups and the expert-data groups of every data group (see ep_group()).
class ProcessGrid {
 public:
  /// Creates the groups over the world (dist::new_group, backend "mpi" on the CPU unless
  /// `backend`/`device` say otherwise; `options` for each group, never announced). Throws on
  /// every rank when shape.size() is not the world size.
  explicit ProcessGrid(const GridShape& shape, const std::string& backend = "mpi",
                       const Device& device = Device::cpu(),
                       const dist::GroupOptions& options = {});
  /// The shape it was built with.
  const GridShape& shape() const { return shape_; }
  /// This rank's place.
  const GridCoords& coords() const { return coords_; }
  /// This rank's world rank.
  int rank() const { return rank_; }
  /// This rank's group along `axis` (a group of one rank where the extent is 1).
  dist::ProcessGroup& group(Axis axis) const;
  /// The world ranks of this rank's group along `axis`.
  const std::vector<int>& members(Axis axis) const;
  /// The ranks that hold the same parameters as this one (the same tp and pp): every CP
  /// rank of every replica, CP · DP ranks, over which the gradients are averaged (each CP
  /// rank's gradient covers its tokens only). A group of its own where CP is above 1 (even
  /// with the CP group's members), the DP group where CP is 1.
  dist::ProcessGroup& data_group() const;
  /// This rank's expert-parallel group: EP consecutive ranks of its data group (data-group
  /// ranks j·EP .. j·EP + EP - 1, in that order), which split the experts among them. Null
  /// where EP is 1 (each rank then holds every expert).
  const std::shared_ptr<dist::ProcessGroup>& ep_group() const { return ep_group_; }
  /// The ranks that hold the same experts as this one: the ranks of its data group with the
  /// same EP rank, as lesson 16's expert_grad_groups gives them (its `expert` ranks). The
  /// data group where EP is 1.
  dist::ProcessGroup& expert_data_group() const;
  /// The pipeline neighbour before this rank (same dp and tp, stage pp - 1), as a rank of
  /// the PP group; -1 on the first stage.
  int prev_stage() const { return coords_.pp > 0 ? coords_.pp - 1 : -1; }
  /// The neighbour after this rank (stage pp + 1) in the PP group; -1 on the last stage.
  int next_stage() const { return coords_.pp + 1 < shape_.pp ? coords_.pp + 1 : -1; }
  /// Collectives issued so far on this rank's groups together (TP, DP, PP, CP, the data
  /// group, and the EP and expert-data groups where EP is above 1).
  std::int64_t collectives_issued() const;

 private:
  GridShape shape_;
  GridCoords coords_;
  int rank_ = 0;
  std::shared_ptr<dist::ProcessGroup> groups_[4];
  std::vector<int> members_[4];
  std::shared_ptr<dist::ProcessGroup> data_group_;  // only where CP > 1 (else the DP group)
  std::shared_ptr<dist::ProcessGroup> ep_group_;           // only where EP > 1
  std::shared_ptr<dist::ProcessGroup> expert_data_group_;  // only where EP > 1
};

}  // namespace mgpu::parallel::grid
