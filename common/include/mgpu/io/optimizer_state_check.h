/// @file optimizer_state_check.h
/// @brief What a checksum cannot see in a loaded optimizer state: step counts and second
/// moments that no training run produces.
///
/// A checksum proves the bytes are those that were saved, not that they make sense: a file
/// written by a buggy tool or edited before its checksums were recomputed can hold an AdamW
/// step of 0 (the bias correction 1 - beta^0 divides by zero), a negative step, a step past
/// the run's own count, or a negative exp_avg_sq (its square root is NaN). Each trains on to
/// `-nan`; each is refused here, naming the file and the tensor. Names follow PyTorch's
/// optimizer state ("<parameter>.step", "<parameter>.exp_avg_sq").
#pragma once

#include <cstdint>
#include <string>

#include "mgpu/io/safetensors.h"

namespace mgpu::io {

/// Checks every "<name>.step" of `state` (one integer in [1, max_step]; max_step < 0: no
/// upper bound) and every "<name>.exp_avg_sq" (no negative value). Throws mgpu::Error
/// naming `source` and the tensor (`section` in front of its name, e.g. "optim.").
void check_optimizer_state(const TensorDict& state, std::int64_t max_step, const std::string& section,
                           const std::string& source);

}  // namespace mgpu::io
