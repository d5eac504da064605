/// @file recompute.h
/// @brief Activation recomputation (activation checkpointing) for a GPT: what each block
/// keeps between its forward and its backward, and what it computes a second time instead.
///
/// Lesson 12 (task 3) writes the recomputing forward and backward; the library owns the
/// switch. Outputs, the loss and every gradient are bit-identical under every policy: a
/// recomputed forward runs the same operations on the same values in the same order.
#pragma once

#include <string>

namespace mgpu::nn {

class GPT;

/// What a GPT keeps for backward: everything (none), each block's input only (full),
/// or all but attention's [B·n_head, T, T] probabilities, recomputed in backward (attn).
enum class RecomputePolicy { none, full, attn };

/// "none" | "full" | "attn" -> the policy; anything else is one clear error naming the
/// three choices.
RecomputePolicy parse_recompute(const std::string& name);

/// The name back ("none", "full", "attn").
const char* recompute_name(RecomputePolicy policy);

/// Applies the policy to every block of the model. Parameter names, values, outputs and
/// gradients are unchanged by it (bit-identical to none); only what is kept differs.
void set_recompute(GPT& model, RecomputePolicy policy);

}  // namespace mgpu::nn
