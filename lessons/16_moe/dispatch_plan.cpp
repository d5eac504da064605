// Task 2: the dispatch plan. Sorting the kept choices by expert makes the rows for one
// expert contiguous, and since rank q holds experts q·L .. q·L + L - 1, the rows for rank q
// too: the send buffer is cut into P pieces, one per rank, as an all-to-all wants it.
#include "mgpu/error.h"
#include "mgpu/parallel/moe/dispatch_plan.h"

namespace mgpu::parallel::moe {

int expert_owner(std::int64_t expert, std::int64_t experts, int ep_size) {
  MGPU_CHECK(ep_size >= 1 && experts % ep_size == 0, "expert_owner: E = ", experts,
             " experts do not split over an EP group of ", ep_size,
             " ranks; choose an EP size that divides E");
  MGPU_CHECK(expert >= 0 && expert < experts, "expert_owner: expert ", expert,
             " is outside 0 .. ", experts - 1);
  int owner = 0;
  // TODO(task2) BEGIN
  owner = static_cast<int>(expert / (experts / ep_size));
  // TODO(task2) END
  return owner;
}

DispatchPlan make_dispatch_plan(const Routing& routing, const std::vector<std::int64_t>& slots,
                                int ep_size) {
  const std::int64_t E = routing.experts, Nk = routing.tokens * routing.k;
  MGPU_CHECK(static_cast<std::int64_t>(slots.size()) == Nk, "make_dispatch_plan: ",
             slots.size(), " slots for N·k = ", Nk, " choices (capacity_slots gives them)");
  MGPU_CHECK(ep_size >= 1 && E % ep_size == 0, "make_dispatch_plan: E = ", E,
             " experts do not split over an EP group of ", ep_size,
             " ranks; choose an EP size that divides E");
  DispatchPlan plan;
  plan.experts = E;
  plan.ep_size = ep_size;
  plan.tokens_per_expert.assign(E, 0);
  plan.send_counts.assign(ep_size, 0);
  // TODO(task2) BEGIN
  for (std::int64_t c = 0; c < Nk; ++c)
    if (slots[c] >= 0) ++plan.tokens_per_expert[routing.expert[c]];
  // Where each expert's rows begin in the send buffer (experts in order).
  std::vector<std::int64_t> begin(E, 0);
  for (std::int64_t e = 1; e < E; ++e) begin[e] = begin[e - 1] + plan.tokens_per_expert[e - 1];
  const std::int64_t kept = E == 0 ? 0 : begin[E - 1] + plan.tokens_per_expert[E - 1];
  plan.order.assign(kept, -1);
  // Within an expert the slots are 0, 1, ... in priority order: the slot is the place.
  for (std::int64_t c = 0; c < Nk; ++c)
    if (slots[c] >= 0) plan.order[begin[routing.expert[c]] + slots[c]] = c;
  for (std::int64_t e = 0; e < E; ++e)
    plan.send_counts[expert_owner(e, E, ep_size)] += plan.tokens_per_expert[e];
  // TODO(task2) END
  return plan;
}

}  // namespace mgpu::parallel::moe
