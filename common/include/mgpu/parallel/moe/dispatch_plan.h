/// @file dispatch_plan.h
/// @brief Mixture of Experts, the dispatch plan: the kept choices sorted by expert, so that
/// the rows for one expert, and for one rank of the expert-parallel group, are contiguous.
///
/// Under expert parallelism the E experts are split over an EP group of P ranks: rank q holds
/// experts [q·L, (q+1)·L), L = E/P. A rank sends each of its kept choices (a copy of the
/// token's row) to the rank of its expert; sorted by expert, the rows for rank q are one
/// contiguous piece of the send buffer, which is what an all-to-all with split sizes sends.
///
///   task 2  expert_owner, make_dispatch_plan  (lessons/16_moe/dispatch_plan.cpp)
///
/// Lesson 16 defines them; the library compiles their reference (solutions/16_moe/).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/parallel/moe/routing.h"

namespace mgpu::parallel::moe {

/// Where each kept choice goes, and how many go to each expert and each rank.
struct DispatchPlan {
  std::int64_t experts = 0;                     ///< E
  int ep_size = 1;                              ///< P, the ranks the experts are split over
  std::vector<std::int64_t> order;              ///< [S]: the kept choices n·k + j, sorted by
                                                ///< expert and, within an expert, by slot: row
                                                ///< i of the send buffer is token order[i] / k
  std::vector<std::int64_t> tokens_per_expert;  ///< [E]: kept choices of each expert
  std::vector<std::int64_t> send_counts;        ///< [P]: rows for each rank of the EP group
};

// ---- Task 2: the dispatch plan (dispatch_plan.cpp) ---------------------------------------------

/// The rank of an EP group of `ep_size` that holds `expert` (of `experts`): expert / L, L =
/// experts / ep_size. Throws unless ep_size >= 1 divides experts and 0 <= expert < experts.
int expert_owner(std::int64_t expert, std::int64_t experts, int ep_size);

/// The plan for `routing`'s choices, `slots` as capacity_slots gave them (-1: dropped, left
/// out of the plan), over an EP group of `ep_size` ranks. Throws when slots is not N·k long,
/// ep_size does not divide E, or for a routing that check_routing refuses.
DispatchPlan make_dispatch_plan(const Routing& routing, const std::vector<std::int64_t>& slots,
                                int ep_size);

}  // namespace mgpu::parallel::moe
