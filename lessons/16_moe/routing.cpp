// Task 1: the router's top-k and the capacity slots. A token goes to the k experts it
// scores best; an expert keeps at most `capacity` of the choices made for it, handed out
// first choices first, so who is dropped is a stated rule and not an accident of order.
#include <algorithm>
#include <cmath>

#include "mgpu/error.h"
#include "mgpu/parallel/moe/routing.h"

namespace mgpu::parallel::moe {

Routing route_top_k(const Tensor& probs, std::int64_t k, const std::vector<double>& bias) {
  MGPU_CHECK(probs.ndim() == 2, "route_top_k: probs must be [N, E], got ", probs.str());
  const std::int64_t N = probs.size(0), E = probs.size(1);
  MGPU_CHECK(k >= 1 && k <= E, "route_top_k: k = ", k, " must be between 1 and E = ", E,
             " (a token chooses k of the E experts)");
  MGPU_CHECK(bias.empty() || static_cast<std::int64_t>(bias.size()) == E,
             "route_top_k: bias has ", bias.size(), " values for E = ", E,
             " experts; give one per expert, or none");
  const std::vector<double> p = probs.to_vector<double>();
  Routing r{N, E, k, std::vector<std::int32_t>(N * k), std::vector<double>(N * k)};
  // TODO(task1) BEGIN
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
      r.weight[n * k + j] = row[experts[j]] / chosen;
    }
  }
  // TODO(task1) END
  return r;
}

std::int64_t expert_capacity(std::int64_t tokens, std::int64_t k, std::int64_t experts,
                             double capacity_factor) {
  MGPU_CHECK(tokens >= 0 && k >= 1 && experts >= 1, "expert_capacity: N = ", tokens, ", k = ",
             k, ", E = ", experts, " (N >= 0, k >= 1 and E >= 1 expected)");
  std::int64_t capacity = -1;
  // TODO(task1) BEGIN
  if (capacity_factor > 0)
    capacity = static_cast<std::int64_t>(
        std::ceil(capacity_factor * static_cast<double>(tokens * k) / static_cast<double>(experts)));
  // TODO(task1) END
  return capacity;
}

std::vector<std::int64_t> capacity_slots(const Routing& routing, std::int64_t capacity) {
  MGPU_CHECK(capacity >= -1, "capacity_slots: capacity = ", capacity,
             "; give the slots per expert (>= 0), or -1 for no limit");
  const std::int64_t N = routing.tokens, k = routing.k;
  std::vector<std::int64_t> slots(N * k, -1);
  // TODO(task1) BEGIN
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
