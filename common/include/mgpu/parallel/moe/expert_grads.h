/// @file expert_grads.h
/// @brief Expert parallelism × data parallelism: over which ranks each gradient is summed,
/// and by what the sum is scaled.
///
/// `world` ranks train as data-parallel replicas of the dense layers, each on its own
/// tokens (the same number on every rank), its loss the mean over its own tokens. The experts are split over EP groups of
/// `ep` consecutive ranks: world rank w is rank w mod ep of EP group w / ep, and holds that
/// EP rank's experts. The gradients must come out as one process's would for the mean loss
/// over all world ranks' tokens.
///
///   task 5  expert_grad_groups  (lessons/16_moe/expert_grads.cpp)
///
/// Lesson 16 defines it; the library compiles its reference (solutions/16_moe/).
#pragma once

#include <vector>

namespace mgpu::parallel::moe {

/// One gradient's reduction: sum it over `ranks`, then multiply by `scale`.
struct GradReduction {
  std::vector<int> ranks;  ///< world ranks to sum over, ascending, this rank among them
  double scale = 1;        ///< the factor applied to the sum
};

/// How world rank `rank` reduces its gradients.
struct ExpertGradGroups {
  GradReduction dense;   ///< for a parameter every rank holds (attention, router, norms)
  GradReduction expert;  ///< for a parameter of this rank's experts
};

// ---- Task 5: the gradient groups (expert_grads.cpp) --------------------------------------------

/// The reductions of world rank `rank` of `world` ranks with EP groups of `ep`. Throws
/// unless ep >= 1 divides world and 0 <= rank < world.
ExpertGradGroups expert_grad_groups(int world, int ep, int rank);

}  // namespace mgpu::parallel::moe
