/// @file init.h
/// @brief Seeded parameter initialisation, as PyTorch's defaults.
///
/// Layers draw their initial weights from a process-wide seed sequence: manual_seed(s)
/// restarts it, and every initialised tensor takes the next seed. Building the same model
/// after the same manual_seed() therefore gives the same weights on every device and rank.
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::nn {

/// Restarts the initialisation seed sequence (like torch.manual_seed for weights).
void manual_seed(std::uint64_t seed);
/// The seed for the next initialised tensor (advances the sequence).
std::uint64_t next_seed();

/// Where the initialisation seed sequence stands, for checkpoints: the seed of the last
/// manual_seed() and how many seeds next_seed() has handed out since.
struct SeedSequenceState {
  std::uint64_t base = 0;   ///< the seed of the last manual_seed()
  std::uint64_t drawn = 0;  ///< seeds handed out since
};
/// The sequence's state now.
SeedSequenceState seed_sequence_state();
/// Puts the sequence back where `state` was: the next next_seed() continues from there.
void set_seed_sequence_state(const SeedSequenceState& state);

/// t <- U(-bound, bound) with the next seed. PyTorch's default for Linear and Conv2d
/// weights and biases is bound = 1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5)).
void uniform_init_(Tensor& t, double bound);

}  // namespace mgpu::nn
