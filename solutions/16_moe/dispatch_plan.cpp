// Task 2: the dispatch plan. Sorting the kept choices by expert makes the rows for one
// expert contiguous, and since rank q holds experts q·L .. q·L + L - 1, the rows for rank q
// too: the send buffer is cut into P pieces, one per rank, as an all-to-all wants it.
#include <algorithm>
#include <vector>

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
  // What you have: expert, experts (E), ep_size (P), already checked: P >= 1 divides E.
  // TODO(task2) BEGIN: chapter §4, task 2: owner = the rank of the EP group that
  // holds `expert`, each rank holding L = E/P consecutive experts (rank q: q·L .. q·L + L - 1).
  // Invariants: 0 <= owner < P; expert 0 on rank 0, expert E - 1 on rank P - 1; P = 1 puts
  // every expert on rank 0, P = E one expert per rank. Stuck: tools/hint 16 2 (about 1 line).
  owner = static_cast<int>(expert / (experts / ep_size));
  // TODO(task2) END
  return owner;
}

DispatchPlan make_dispatch_plan(const Routing& routing, const std::vector<std::int64_t>& slots,
                                int ep_size) {
  check_routing(routing, "make_dispatch_plan");
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
  // What you have: routing.expert (choice c = n·k + j: token n's j-th choice's expert), Nk
  // (N·k), E, ep_size (P); slots (slots[c]: choice c's place in its expert's buffer, -1 when
  // dropped; an expert's kept slots are 0, 1, ... as capacity_slots numbers them); plan, its
  // tokens_per_expert (E zeros) and send_counts (P zeros) ready; expert_owner (above);
  // std::vector, std::stable_sort with a comparator of your own.
  // TODO(task2) BEGIN: chapter §4, task 2: plan.order = the kept choices c (slot >=
  // 0), sorted by expert and, within an expert, by slot; plan.tokens_per_expert[e] = the
  // kept choices of expert e; plan.send_counts[q] = the kept choices whose expert rank q
  // holds. Invariants: a dropped choice appears nowhere; order holds each kept choice once;
  // Σ tokens_per_expert = Σ send_counts = order's length; rank q's rows are one contiguous
  // piece of order, after those of ranks 0 .. q - 1; integer-exact, no floating point.
  // Stuck: tools/hint 16 2 (about 12 lines).
  for (std::int64_t c = 0; c < Nk; ++c)
    if (slots[c] >= 0) ++plan.tokens_per_expert[routing.expert[c]];
  // Where each expert's rows begin in the send buffer (experts in order).
  std::vector<std::int64_t> begin(E, 0);
  for (std::int64_t e = 1; e < E; ++e) begin[e] = begin[e - 1] + plan.tokens_per_expert[e - 1];
  const std::int64_t kept = begin[E - 1] + plan.tokens_per_expert[E - 1];
  plan.order.assign(kept, -1);
  // Within an expert the slots are 0, 1, ... in priority order: the slot is the place.
  for (std::int64_t c = 0; c < Nk; ++c) {
    if (slots[c] < 0) continue;
    const std::int32_t e = routing.expert[c];
    MGPU_CHECK(slots[c] < plan.tokens_per_expert[e] && plan.order[begin[e] + slots[c]] < 0,
               "make_dispatch_plan: choice ", c, " has slot ", slots[c], " in expert ", e,
               ", which keeps ", plan.tokens_per_expert[e],
               " choices; its slots must be 0, 1, ... once each (as capacity_slots numbers them)");
    plan.order[begin[e] + slots[c]] = c;
  }
  for (std::int64_t e = 0; e < E; ++e)
    plan.send_counts[expert_owner(e, E, ep_size)] += plan.tokens_per_expert[e];
  // TODO(task2) END
  return plan;
}

}  // namespace mgpu::parallel::moe
