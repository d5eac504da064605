/// @file load_balance.h
/// @brief Mixture of Experts, load balancing: the Switch Transformer's auxiliary loss and its
/// gradient, and DeepSeek-V3's auxiliary-loss-free bias.
///
/// A router left alone sends most tokens to a few experts: they drop tokens while the others
/// idle. The auxiliary loss (Fedus et al. 2021, "Switch Transformers") adds
/// α · E · Σ_e f_e · P_e to the loss, smallest when both the fraction of choices f_e and the
/// mean probability P_e are 1/E. DeepSeek-V3 (2024) instead adds a per-expert bias to the
/// scores used for selection, raised for underloaded experts and lowered for overloaded ones
/// after each step, leaving the loss and the weights untouched.
///
///   task 4  switch_aux_loss, update_expert_bias  (lessons/16_moe/load_balance.cpp)
///
/// Lesson 16 defines them; the library compiles their reference (solutions/16_moe/).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/parallel/moe/routing.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::moe {

/// The auxiliary loss's value, its gradient and its two factors.
struct AuxLoss {
  double value = 0;                ///< α · E · Σ_e f_e · P_e
  Tensor grad_probs;               ///< [N, E]: d value / d probs (f_e held constant), probs'
                                   ///< dtype and device
  std::vector<double> fraction;    ///< [E]: f_e, the choices routed to e (before capacity)
                                   ///< over N·k
  std::vector<double> mean_prob;   ///< [E]: P_e, the mean of probs[:, e] over the N tokens
};

// ---- Task 4: load balancing (load_balance.cpp) -------------------------------------------------

/// The Switch Transformer's load-balancing loss of `routing`'s choices and their `probs`
/// [N, E] (f32 or f64, any device), scaled by `alpha`. f_e counts choices, so it has no
/// gradient: d value / d probs[n, e] = α · E · f_e / N. N = 0 gives value 0 and every f_e
/// and P_e 0. Throws when probs' shape does not match routing's N and E, or for a routing
/// that check_routing refuses.
AuxLoss switch_aux_loss(const Tensor& probs, const Routing& routing, double alpha);

/// DeepSeek-V3's bias update after a step: bias[e] += gamma · sign(mean − load[e]), where
/// load[e] is the choices expert e received over the step (all ranks') and mean their
/// average over the experts; sign(0) = 0. Throws when bias and load differ in length.
void update_expert_bias(std::vector<double>& bias, const std::vector<std::int64_t>& load,
                        double gamma);

}  // namespace mgpu::parallel::moe
