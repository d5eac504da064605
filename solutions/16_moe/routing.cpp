// Task 1: the router's top-k and the capacity slots. A token goes to the k experts it
// scores best; an expert keeps at most `capacity` of the choices made for it, handed out
// first choices first, so who is dropped is a stated rule and not an accident of order.
#include <algorithm>
#include <cmath>

#include "mgpu/error.h"
#include "mgpu/parallel/moe/routing.h"

namespace mgpu::parallel::moe {

void check_routing(const Routing& routing, const char* op) {
  const std::int64_t N = routing.tokens, E = routing.experts, k = routing.k;
  MGPU_CHECK(N >= 0 && E >= 1 && k >= 1 && k <= E, op, ": a routing of N = ", N,
             " tokens, E = ", E, " experts, k = ", k, " (N >= 0 and 1 <= k <= E expected)");
  MGPU_CHECK(static_cast<std::int64_t>(routing.expert.size()) == N * k, op,
             ": routing.expert has ", routing.expert.size(), " entries for N·k = ", N * k,
             " choices");
  for (std::int64_t c = 0; c < N * k; ++c)
    MGPU_CHECK(routing.expert[c] >= 0 && routing.expert[c] < E, op, ": choice ", c, " (token ",
               c / k, ", choice ", c % k, ") names expert ", routing.expert[c], ", outside 0 .. ",
               E - 1);
}

Routing route_top_k(const Tensor& probs, std::int64_t k, const std::vector<double>& bias) {
  MGPU_CHECK(probs.ndim() == 2, "route_top_k: probs must be [N, E], got ", probs.str());
  const std::int64_t N = probs.size(0), E = probs.size(1);
  MGPU_CHECK(k >= 1 && k <= E, "route_top_k: k = ", k, " must be between 1 and E = ", E,
             " (a token chooses k of the E experts)");
  MGPU_CHECK(bias.empty() || static_cast<std::int64_t>(bias.size()) == E,
             "route_top_k: bias has ", bias.size(), " values for E = ", E,
             " experts; give one per expert, or none");
  const std::vector<double> p = probs.to_vector<double>();
  // A NaN would leave "the k largest" undefined (and the sort's order with it).
  for (std::int64_t i = 0; i < N * E; ++i)
    MGPU_CHECK(std::isfinite(p[i]) && p[i] >= 0, "route_top_k: probs[", i / E, ", ", i % E,
               "] = ", p[i], "; the router's probabilities must be finite and >= 0");
  for (std::size_t e = 0; e < bias.size(); ++e)
    MGPU_CHECK(std::isfinite(bias[e]), "route_top_k: bias[", e, "] = ", bias[e],
               " is not finite");
  Routing r{N, E, k, std::vector<std::int32_t>(N * k), std::vector<double>(N * k)};
  // What you have: p (probs on the host, row-major: p[n·E + e]), N, E, k, bias (empty or E
  // long); r, its expert and weight already N·k long; std::partial_sort, std::sort,
  // std::stable_sort (<algorithm>) with a comparator of your own.
  // TODO(task1) BEGIN: chapter §2, task 1: for every token n, r.expert[n·k + j] (j =
  // 0 .. k-1) = its k experts of largest score probs[n, e] + bias[e] (no bias: 0), best
  // first, and r.weight[n·k + j] = that expert's probs[n, e] over the sum of the k chosen
  // probs. Invariants: equal scores go to the lower expert index; the bias moves the
  // selection only, never a weight; a token's weights sum to 1, and are 1/k each when its
  // chosen probs are all 0; k = E is every expert, sorted. Stuck: tools/hint 16 1 (about 15
  // lines).
  std::vector<std::int32_t> experts(E);
  for (std::int64_t n = 0; n < N; ++n) {
    const double* row = p.data() + n * E;
    auto score = [&](std::int32_t e) { return row[e] + (bias.empty() ? 0.0 : bias[e]); };
    for (std::int32_t e = 0; e < E; ++e) experts[e] = e;
    // The k best, best first; equal scores keep the lower index first.
    std::partial_sort(experts.begin(), experts.begin() + k, experts.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        return score(a) > score(b) || (score(a) == score(b) && a < b);
                      });
    double chosen = 0;
    for (std::int64_t j = 0; j < k; ++j) chosen += row[experts[j]];
    for (std::int64_t j = 0; j < k; ++j) {
      r.expert[n * k + j] = experts[j];
      // All chosen probs 0: nothing to renormalise, so the k share equally.
      r.weight[n * k + j] = chosen > 0 ? row[experts[j]] / chosen : 1.0 / static_cast<double>(k);
    }
  }
  // TODO(task1) END
  return r;
}

std::int64_t expert_capacity(std::int64_t tokens, std::int64_t k, std::int64_t experts,
                             double capacity_factor) {
  MGPU_CHECK(tokens >= 0 && k >= 1 && experts >= 1, "expert_capacity: N = ", tokens, ", k = ",
             k, ", E = ", experts, " (N >= 0, k >= 1 and E >= 1 expected)");
  MGPU_CHECK(std::isfinite(capacity_factor), "expert_capacity: capacity_factor = ",
             capacity_factor, "; give a number (<= 0 for no limit)");
  std::int64_t capacity = -1;
  // What you have: tokens (N), k, experts (E), capacity_factor; std::ceil.
  // TODO(task1) BEGIN: chapter §3, task 1: capacity = the slots of one
  // expert, ceil(capacity_factor · N · k / E), rounded up (a fraction of a slot is a slot).
  // Invariants: a capacity_factor <= 0 leaves capacity -1 (dropless); factor 1 with N·k a
  // multiple of E is exactly N·k / E. Stuck: tools/hint 16 1 (about 3 lines).
  if (capacity_factor > 0)
    capacity = static_cast<std::int64_t>(std::ceil(
        capacity_factor * static_cast<double>(tokens * k) / static_cast<double>(experts)));
  // TODO(task1) END
  return capacity;
}

std::vector<std::int64_t> capacity_slots(const Routing& routing, std::int64_t capacity) {
  MGPU_CHECK(capacity >= -1, "capacity_slots: capacity = ", capacity,
             "; give the slots per expert (>= 0), or -1 for no limit");
  check_routing(routing, "capacity_slots");
  const std::int64_t N = routing.tokens, k = routing.k;
  std::vector<std::int64_t> slots(N * k, -1);
  // What you have: routing.expert (choice n·k + j: token n's j-th choice), N, k,
  // routing.experts (E), capacity (-1: no limit); slots, N·k entries of -1 (dropped).
  // TODO(task1) BEGIN: chapter §3, task 1: slots[n·k + j] = the place
  // of choice (n, j) in its expert's buffer, or -1 when dropped, by GShard's priority: choice
  // (n, j) comes before (n', j') when j < j', or j == j' and n < n' (every first choice,
  // tokens in order, before any second choice). A choice is kept when fewer than `capacity`
  // choices of its expert are kept before it; its slot is how many are. Invariants: an
  // expert's kept slots are 0, 1, ... with no gap and none >= capacity; no choice keeps a
  // place in an expert after one of the expert's choices before it was dropped; capacity -1
  // keeps every choice, numbered in the same order; capacity 0 drops all. Stuck: tools/hint
  // 16 1 (about 8 lines).
  std::vector<std::int64_t> filled(routing.experts, 0);
  for (std::int64_t j = 0; j < k; ++j)      // first choices first, then second, ...
    for (std::int64_t n = 0; n < N; ++n) {  // tokens in order within one choice rank
      const std::int32_t e = routing.expert[n * k + j];
      if (capacity < 0 || filled[e] < capacity) slots[n * k + j] = filled[e]++;
    }
  // TODO(task1) END
  return slots;
}

}  // namespace mgpu::parallel::moe
