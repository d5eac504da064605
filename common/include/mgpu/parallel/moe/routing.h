/// @file routing.h
/// @brief Mixture of Experts, the router's choice: each token's top-k experts with their
/// weights, and the capacity slots that decide which choices an expert keeps.
///
/// A router scores every token against every expert (probs [N, E], a softmax over the
/// experts); token n goes to its k best experts, its output the weighted sum of theirs. An
/// expert's buffer has room for `capacity` rows; a choice that finds its expert full is
/// dropped (the token's residual carries it past the layer). The order in which slots are
/// handed out is the rule that decides who is dropped.
///
///   task 1  route_top_k, expert_capacity, capacity_slots  (lessons/16_moe/routing.cpp)
///
/// Lesson 16 defines them; the library compiles their reference (solutions/16_moe/).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::parallel::moe {

/// The router's choice for N tokens among E experts, k per token.
struct Routing {
  std::int64_t tokens = 0;           ///< N
  std::int64_t experts = 0;          ///< E
  std::int64_t k = 0;                ///< choices per token, 1 <= k <= E
  std::vector<std::int32_t> expert;  ///< [N·k]: expert[n·k + j] is token n's j-th choice
  std::vector<double> weight;        ///< [N·k]: its weight (the chosen probabilities of token
                                     ///< n renormalised to sum to 1)
};

// ---- Task 1: top-k and capacity (routing.cpp) --------------------------------------------------

/// Token n's choices: the k experts with the largest probs[n, e] + bias[e], best first, a tie
/// going to the lower expert index. `bias` is empty (no bias) or E long: DeepSeek-V3's
/// balancing bias, which steers the selection only; the weights are the chosen probs[n, e]
/// (without bias) divided by their sum, or 1/k each when the chosen probs are all 0 (an f32
/// softmax that underflowed, a bias that chose experts the router gives nothing). probs is
/// [N, E], f32 or f64, on any device (read on the host). Throws unless 1 <= k <= E, bias is
/// empty or E long, every prob is finite and >= 0 and every bias finite.
Routing route_top_k(const Tensor& probs, std::int64_t k, const std::vector<double>& bias = {});

/// An expert's slots for N tokens with k choices each among E experts: ceil(capacity_factor ·
/// N · k / E) (the Switch Transformer's expert capacity, with k). A capacity_factor <= 0
/// means no limit (dropless): returns -1. Throws for a capacity_factor that is not finite.
std::int64_t expert_capacity(std::int64_t tokens, std::int64_t k, std::int64_t experts,
                             double capacity_factor);

/// For each choice (n, j), at n·k + j: its slot in its expert's buffer (0, 1, ...), or -1
/// when dropped. Slots are handed out in priority order: every token's first choice (tokens
/// in order), then every token's second choice, and so on (GShard's rule: a token's first
/// choice never loses its place to another token's second); a choice whose expert has
/// `capacity` slots filled already is dropped. capacity -1: none is dropped (dropless), the
/// slots numbered in the same order. Throws for capacity below -1 or a routing that
/// check_routing refuses.
std::vector<std::int64_t> capacity_slots(const Routing& routing, std::int64_t capacity);

/// Throws, naming `op`, unless `routing`'s choices are consistent: N >= 0, 1 <= k <= E,
/// expert N·k long and each of its entries in 0 .. E - 1 (weight is not looked at).
/// capacity_slots, make_dispatch_plan and switch_aux_loss call it first.
void check_routing(const Routing& routing, const char* op);

}  // namespace mgpu::parallel::moe
