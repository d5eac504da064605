// The process grid's groups: every group of every axis created on every rank, in one order.
#include <algorithm>
#include <sstream>

#include "mgpu/dist/runtime.h"
#include "mgpu/error.h"
#include "mgpu/parallel/grid/grid.h"

namespace mgpu::parallel::grid {

namespace {
int axis_index(Axis axis) { return axis == Axis::tp ? 0 : axis == Axis::dp ? 1 : 2; }
}  // namespace

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::tp: return "tp";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
  }
  return "?";
}

int GridShape::extent(Axis axis) const {
  return axis == Axis::tp ? tp : axis == Axis::dp ? dp : pp;
}

std::string GridShape::str() const {
  std::ostringstream s;
  s << "DP " << dp << " x TP " << tp << " x PP " << pp;
  return s.str();
}

int GridCoords::along(Axis axis) const {
  return axis == Axis::tp ? tp : axis == Axis::dp ? dp : pp;
}

std::vector<std::vector<int>> axis_groups(const GridShape& shape, Axis axis) {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(static_cast<std::size_t>(shape.size()), false);
  for (int r = 0; r < shape.size(); ++r) {
    if (seen[static_cast<std::size_t>(r)]) continue;
    std::vector<int> g = axis_group(shape, axis, r);
    MGPU_CHECK(static_cast<int>(g.size()) == shape.extent(axis) &&
                   std::find(g.begin(), g.end(), r) != g.end(),
               "axis_groups: the ", axis_name(axis), " group of rank ", r, " in ", shape.str(),
               " has ", g.size(), " member(s) and must hold ", shape.extent(axis),
               ", the rank among them");
    for (int m : g) {
      MGPU_CHECK(m >= 0 && m < shape.size() && !seen[static_cast<std::size_t>(m)],
                 "axis_groups: rank ", m, " is in two ", axis_name(axis), " groups of ",
                 shape.str());
      seen[static_cast<std::size_t>(m)] = true;
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

void check_grid(const GridShape& shape, int world) {
  MGPU_CHECK(shape.dp >= 1 && shape.tp >= 1 && shape.pp >= 1 && shape.size() == world,
             "the grid ", shape.str(), " holds ", shape.size(), " rank(s), but ", world,
             " were started: DP x TP x PP must equal the number of ranks (tools/mpirun -np ",
             shape.size(), ")");
}

ProcessGrid::ProcessGrid(const GridShape& shape, const std::string& backend, const Device& device,
                         const dist::GroupOptions& options)
    : shape_(shape), rank_(dist::rank()) {
  check_grid(shape, dist::world_size());
  coords_ = grid_coords(shape, rank_);
  dist::GroupOptions quiet = options;
  quiet.announce = false;
  // Collective over the world: every rank creates every group, members or not, in the same
  // order (TP's, DP's, PP's), and keeps the one of each axis it is in.
  for (Axis axis : {Axis::tp, Axis::dp, Axis::pp}) {
    const int i = axis_index(axis);
    for (const std::vector<int>& members : axis_groups(shape, axis)) {
      if (auto g = dist::new_group(members, backend, device, quiet)) {
        groups_[i] = std::move(g);
        members_[i] = members;
      }
    }
    MGPU_CHECK(groups_[i] != nullptr, "ProcessGrid: rank ", rank_, " is in no ", axis_name(axis),
               " group of ", shape.str());
  }
}

dist::ProcessGroup& ProcessGrid::group(Axis axis) const { return *groups_[axis_index(axis)]; }

const std::vector<int>& ProcessGrid::members(Axis axis) const { return members_[axis_index(axis)]; }

std::int64_t ProcessGrid::collectives_issued() const {
  std::int64_t n = 0;
  for (const auto& g : groups_) n += std::max<std::int64_t>(0, g->collectives_issued());
  return n;
}

}  // namespace mgpu::parallel::grid
