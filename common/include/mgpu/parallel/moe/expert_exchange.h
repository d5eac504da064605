/// @file expert_exchange.h
/// @brief Expert parallelism's two all-to-alls: a rank's rows to the ranks of their experts,
/// and the experts' rows back.
///
/// Dispatch sends the send buffer (rows in the plan's order) to the experts' ranks; there
/// each rank holds, for each of its L experts, the rows every rank sent it. To run each
/// expert on one contiguous block, the received rows (grouped by source rank, then expert)
/// are regrouped by expert, then source rank (expert-major). Combine is the exact inverse.
/// The backward moves gradients the other way with the same two functions: the gradient of
/// a dispatch is a from_experts, the gradient of a combine a to_experts.
///
///   send buffer [S, M]  --to_experts-->    expert-major [R, M]   (1 all-to-all + regroup)
///   expert-major [R, M] --from_experts-->  send buffer [S, M]    (regroup + 1 all-to-all)
///
///   task 3  exchange_counts, to_experts, from_experts  (lessons/16_moe/expert_exchange.cpp)
///
/// Lesson 16 defines them; the library compiles their reference (solutions/16_moe/).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/parallel/moe/dispatch_plan.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::moe {

/// Who sends how many rows to which expert, learned once per step by exchange_counts.
struct ExpertExchange {
  int ep_size = 1;                        ///< P, the EP group's size
  std::int64_t local_experts = 0;         ///< L = E/P: this rank holds experts rank·L ..
  std::vector<std::int64_t> send_counts;  ///< [P·L]: rows this rank sends to local expert l
                                          ///< of rank q, at q·L + l (the plan's
                                          ///< tokens_per_expert)
  std::vector<std::int64_t> recv_counts;  ///< [P·L]: rows rank q sends this rank's local
                                          ///< expert l, at q·L + l
};

// ---- Task 3: dispatch and combine (expert_exchange.cpp) ----------------------------------------

/// Exchanges the plan's counts over `group` (of the plan's ep_size ranks) in one all_to_all
/// of an i64 tensor on the CPU, so that each rank knows what it will receive. Throws, before
/// any traffic, when the group's size is not the plan's ep_size or the plan's E counts do
/// not split over it.
ExpertExchange exchange_counts(const DispatchPlan& plan, dist::ProcessGroup& group);

/// rows [S, M], S = sum of ex.send_counts, in the plan's order -> this rank's experts' rows
/// [R, M], R = sum of ex.recv_counts, expert-major: local expert 0's rows (rank 0's, then rank
/// 1's, ...), then local expert 1's, ... One all_to_all with split sizes; rows keep their
/// dtype, device and row shape ([S, M], [S, a, b], ...); values only move (exact). A rank
/// may send or receive no rows. Throws, before any traffic, when the group's size is not
/// ex.ep_size or rows are not S rows.
Tensor to_experts(const Tensor& rows, const ExpertExchange& ex, dist::ProcessGroup& group);

/// The inverse of to_experts: expert-major [R, M] -> [S, M] in the plan's order, on the ranks
/// the rows came from. from_experts(to_experts(x)) == x exactly. One all_to_all. Throws,
/// before any traffic, when the group's size is not ex.ep_size or rows are not R rows.
Tensor from_experts(const Tensor& rows, const ExpertExchange& ex, dist::ProcessGroup& group);

}  // namespace mgpu::parallel::moe
