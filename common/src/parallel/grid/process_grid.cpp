// The process grid's groups: every group of every axis created on every rank, in one order.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <sstream>

#include "mgpu/dist/runtime.h"
#include "mgpu/error.h"
#include "mgpu/parallel/grid/grid.h"
#include "mgpu/parallel/moe/expert_grads.h"

namespace mgpu::parallel::grid {

namespace {
int axis_index(Axis axis) {
  switch (axis) {
    case Axis::tp: return 0;
    case Axis::dp: return 1;
    case Axis::pp: return 2;
    case Axis::cp: return 3;
  }
  return 0;
}

// The data groups: the ranks that share tp and pp (every cp, every dp), ascending, ordered
// by their smallest rank.
std::vector<std::vector<int>> data_groups(const GridShape& shape) {
  std::vector<std::vector<int>> groups;
  for (int pp = 0; pp < shape.pp; ++pp)
    for (int tp = 0; tp < shape.tp; ++tp) {
      std::vector<int> g;
      for (int dp = 0; dp < shape.dp; ++dp)
        for (int cp = 0; cp < shape.cp; ++cp) g.push_back(grid_rank(shape, GridCoords{dp, tp, pp, cp}));
      std::sort(g.begin(), g.end());
      groups.push_back(std::move(g));
    }
  std::sort(groups.begin(), groups.end());
  return groups;
}
}  // namespace

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::tp: return "tp";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
    case Axis::cp: return "cp";
  }
  return "?";
}

int GridShape::extent(Axis axis) const {
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::dp: return dp;
    case Axis::pp: return pp;
    case Axis::cp: return cp;
  }
  return 1;
}

std::string GridShape::str() const {
  std::ostringstream s;
  s << "DP " << dp;
  if (ep != 1) s << " (EP " << ep << ")";
  if (cp != 1) s << " x CP " << cp;
  s << " x TP " << tp << " x PP " << pp;
  return s.str();
}

int GridCoords::along(Axis axis) const {
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::dp: return dp;
    case Axis::pp: return pp;
    case Axis::cp: return cp;
  }
  return 0;
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
  const char* axes = shape.cp == 1 ? "DP x TP x PP" : "DP x CP x TP x PP";
  MGPU_CHECK(shape.dp >= 1 && shape.tp >= 1 && shape.pp >= 1 && shape.cp >= 1, "the grid ",
             shape.str(), ": every extent must be at least 1 (", axes, " ranks)");
  // The product in 64 bits, saturated past an int: extents whose product overflows are
  // refused as "more than", never as a wrapped count.
  const std::int64_t most = std::numeric_limits<int>::max();
  std::int64_t ranks = 1;
  for (int extent : {shape.dp, shape.cp, shape.tp, shape.pp})
    ranks = std::min<std::int64_t>(ranks * extent, most + 1);
  MGPU_CHECK(ranks == world, "the grid ", shape.str(), " holds ",
             ranks > most ? "more than " + std::to_string(most) : std::to_string(ranks),
             " rank(s), but ", world, " were started: ", axes, " must equal the number of ranks",
             ranks > most ? std::string(" (make the grid smaller)")
                          : " (tools/mpirun -np " + std::to_string(ranks) + ")");
  MGPU_CHECK(shape.ep >= 1 && (shape.dp * shape.cp) % shape.ep == 0, "the grid ", shape.str(),
             ": EP ", shape.ep, " groups consecutive data-parallel ranks, so it must divide the ",
             shape.dp * shape.cp, " rank(s) of a data group (DP x CP): choose --ep among its "
             "divisors, or raise --dp");
}

ProcessGrid::ProcessGrid(const GridShape& shape, const std::string& backend, const Device& device,
                         const dist::GroupOptions& options)
    : shape_(shape), rank_(dist::rank()) {
  check_grid(shape, dist::world_size());
  coords_ = grid_coords(shape, rank_);
  dist::GroupOptions quiet = options;
  quiet.announce = false;
  // Collective over the world: every rank creates every group, members or not, in the same
  // order (TP's, DP's, PP's, CP's), and keeps the one of each axis it is in.
  for (Axis axis : {Axis::tp, Axis::dp, Axis::pp, Axis::cp}) {
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
  // The data groups (CP x DP): a group of their own wherever CP is above 1 (even when DP is
  // 1 and it holds the CP group's ranks), so that its collectives are counted apart from
  // the attention's.
  if (shape.cp > 1)
    for (const std::vector<int>& members : data_groups(shape))
      if (auto g = dist::new_group(members, backend, device, quiet)) data_group_ = std::move(g);
  // Expert parallelism within each data group: the EP groups (consecutive data ranks), then
  // the expert-data groups, the ranks lesson 16's rule sums each expert's gradient over.
  if (shape.ep > 1) {
    const std::vector<std::vector<int>> data = data_groups(shape);
    const int D = shape.dp * shape.cp, ep = shape.ep;
    auto world_ranks = [](const std::vector<int>& members, const std::vector<int>& data_ranks) {
      std::vector<int> out;
      for (int r : data_ranks) out.push_back(members.at(static_cast<std::size_t>(r)));
      return out;
    };
    for (const std::vector<int>& members : data)
      for (int j = 0; j < D / ep; ++j) {
        std::vector<int> ep_ranks;
        for (int e = 0; e < ep; ++e) ep_ranks.push_back(j * ep + e);
        if (auto g = dist::new_group(world_ranks(members, ep_ranks), backend, device, quiet))
          ep_group_ = std::move(g);
      }
    for (const std::vector<int>& members : data)
      for (int e = 0; e < ep; ++e) {
        const parallel::moe::ExpertGradGroups rule = parallel::moe::expert_grad_groups(D, ep, e);
        if (auto g = dist::new_group(world_ranks(members, rule.expert.ranks), backend, device, quiet))
          expert_data_group_ = std::move(g);
      }
    MGPU_CHECK(ep_group_ && expert_data_group_, "ProcessGrid: rank ", rank_, " is in no EP or "
               "expert-data group of ", shape.str());
  }
}

dist::ProcessGroup& ProcessGrid::group(Axis axis) const { return *groups_[axis_index(axis)]; }

dist::ProcessGroup& ProcessGrid::data_group() const {
  return data_group_ ? *data_group_ : group(Axis::dp);
}

dist::ProcessGroup& ProcessGrid::expert_data_group() const {
  return expert_data_group_ ? *expert_data_group_ : data_group();
}

const std::vector<int>& ProcessGrid::members(Axis axis) const { return members_[axis_index(axis)]; }

std::int64_t ProcessGrid::collectives_issued() const {
  std::int64_t n = 0;
  for (const auto& g : groups_) n += std::max<std::int64_t>(0, g->collectives_issued());
  for (const auto* g : {&data_group_, &ep_group_, &expert_data_group_})
    if (*g) n += std::max<std::int64_t>(0, (*g)->collectives_issued());
  return n;
}

}  // namespace mgpu::parallel::grid
