// Task 4: load balancing. The auxiliary loss pushes the router's probabilities towards the
// experts that receive few tokens; the bias of DeepSeek-V3 reaches the same balance by
// steering the selection alone, with no term in the loss.
#include "mgpu/error.h"
#include "mgpu/parallel/moe/load_balance.h"

namespace mgpu::parallel::moe {

AuxLoss switch_aux_loss(const Tensor& probs, const Routing& routing, double alpha) {
  check_routing(routing, "switch_aux_loss");
  MGPU_CHECK(probs.ndim() == 2 && probs.size(0) == routing.tokens &&
                 probs.size(1) == routing.experts,
             "switch_aux_loss: probs ", probs.str(), " for a routing of N = ", routing.tokens,
             " tokens and E = ", routing.experts, " experts");
  const std::int64_t N = routing.tokens, E = routing.experts, k = routing.k;
  const std::vector<double> p = probs.to_vector<double>();
  AuxLoss aux;
  aux.fraction.assign(E, 0.0);
  aux.mean_prob.assign(E, 0.0);
  std::vector<double> grad(N * E, 0.0);
  // What you have: p (probs on the host, row-major: p[n·E + e]), N, E, k, alpha;
  // routing.expert (choice n·k + j: token n's j-th choice); aux, its fraction and mean_prob
  // E zeros, value 0; grad (N·E zeros, row-major like p), which becomes aux.grad_probs below.
  // TODO(task4) BEGIN: chapter §8, task 4: aux.fraction[e] = f_e, the choices
  // routed to e over N·k (every choice counts, dropped or not); aux.mean_prob[e] = P_e, the
  // mean of probs[:, e] over the N tokens; aux.value = α · E · Σ_e f_e · P_e; grad[n·E + e] =
  // d value / d probs[n, e] with f held constant. Invariants: Σ_e f_e = 1 and Σ_e P_e = 1
  // for rows that sum to 1; a balanced routing of a uniform router gives value = α; the
  // gradient is the same for every token; N = 0 gives all zeros (no NaN). Stuck:
  // tools/hint 16 4 (about 12 lines).
  if (N > 0) {
    for (std::int64_t c = 0; c < N * k; ++c) aux.fraction[routing.expert[c]] += 1.0;
    for (std::int64_t e = 0; e < E; ++e) aux.fraction[e] /= static_cast<double>(N * k);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t e = 0; e < E; ++e) aux.mean_prob[e] += p[n * E + e];
    for (std::int64_t e = 0; e < E; ++e) {
      aux.mean_prob[e] /= static_cast<double>(N);
      aux.value += alpha * static_cast<double>(E) * aux.fraction[e] * aux.mean_prob[e];
    }
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t e = 0; e < E; ++e)
        grad[n * E + e] = alpha * static_cast<double>(E) * aux.fraction[e] / static_cast<double>(N);
  }
  // TODO(task4) END
  aux.grad_probs = Tensor::from_vector(grad, probs.shape()).to(probs.dtype()).to(probs.device());
  return aux;
}

void update_expert_bias(std::vector<double>& bias, const std::vector<std::int64_t>& load,
                        double gamma) {
  MGPU_CHECK(bias.size() == load.size(), "update_expert_bias: ", bias.size(),
             " biases for ", load.size(), " experts' loads");
  // What you have: bias (updated in place), load (choices per expert over the step, all
  // ranks'), gamma (the step of the update).
  // TODO(task4) BEGIN: chapter §8, task 4: bias[e] += gamma · sign(mean − load[e]),
  // mean the average of load over the experts. Invariants: an expert loaded exactly at the
  // mean keeps its bias (sign(0) = 0, not a rounding accident); each bias moves by +gamma,
  // -gamma or not at all; no expert: nothing to do. Stuck: tools/hint 16 4 (about 6 lines).
  double mean = 0;
  for (std::int64_t l : load) mean += static_cast<double>(l);
  if (!load.empty()) mean /= static_cast<double>(load.size());
  for (std::size_t e = 0; e < bias.size(); ++e) {
    const double gap = mean - static_cast<double>(load[e]);
    bias[e] += gamma * static_cast<double>((gap > 0) - (gap < 0));
  }
  // TODO(task4) END
}

}  // namespace mgpu::parallel::moe
