/// @file moe_gpt.h
/// @brief gpt-tiny-moe: lesson 12's one GPT with a Mixture of Experts in place of every
/// other block's MLP (lesson 16). nn::Block calls its "mlp" child through the base class,
/// so the model definition stays nn::GPT's: use_experts() swaps the children of the chosen
/// blocks for MoE layers (mgpu/parallel/moe/moe_layer.h), one process's, every expert here.
/// A plan with EP above 1 (gpt_plan.h) then gives each rank its experts (parallel_gpt.h).
///
/// As the Switch Transformer and GShard do, the MoE layers alternate with dense MLPs
/// (blocks 1, 3, ...); each expert is the dense MLP's shape (hidden 4C), so a token's
/// compute is k MLPs' where the parameters are E MLPs'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/nn/gpt.h"
#include "mgpu/parallel/moe/moe_layer.h"

namespace mgpu::parallel::gpt {

/// How the experts' load is balanced.
enum class Balance {
  aux,   ///< the Switch Transformer's auxiliary loss (α = MoEGptConfig::kAuxAlpha)
  bias,  ///< DeepSeek-V3's auxiliary-loss-free bias (γ = MoEGptConfig::kBiasGamma)
  none,  ///< neither: the router left alone
};
/// "aux", "bias" or "none".
const char* balance_name(Balance balance);
/// The balance named `name` ("aux", "bias", "none"); throws naming the three otherwise.
Balance parse_balance(const std::string& name);

/// Which blocks hold experts, and their routing.
struct MoEGptConfig {
  static constexpr double kAuxAlpha = 0.01;   ///< the Switch Transformer's α
  static constexpr double kBiasGamma = 0.001; ///< DeepSeek-V3's bias update speed γ
  std::int64_t experts = 4;       ///< E per MoE layer
  std::int64_t k = 2;             ///< experts per token
  double capacity_factor = 1.25;  ///< slots per expert = ceil(f · N · k / E); <= 0: dropless
  double aux_alpha = kAuxAlpha;   ///< the auxiliary loss's α (0: none)
  double bias_gamma = 0;          ///< the balancing bias's γ (0: no bias)
  std::int64_t every = 2;         ///< an MoE every `every` blocks ...
  std::int64_t first = 1;         ///< ... from block `first` on (1, 3, 5, ...)

  /// gpt-tiny-moe: 4 experts, k = 2, capacity factor 1.25, the auxiliary loss, blocks 1, 3.
  static MoEGptConfig tiny();
  /// This configuration balanced by `balance`: α = kAuxAlpha and γ = 0 for aux, α = 0 and
  /// γ = kBiasGamma for bias, both 0 for none.
  MoEGptConfig balanced(Balance balance) const;
  /// Whether block `block` holds an MoE.
  bool is_moe_block(std::int64_t block) const;
  /// The MoE layers' count in a model of `n_layer` blocks.
  std::int64_t moe_blocks(std::int64_t n_layer) const;
  /// The layer's configuration in a model of width C: dim C, hidden 4C.
  moe::MoEConfig layer(std::int64_t n_embd) const;
  /// "4 experts, k = 2, capacity factor 1.25, aux 0.01, bias 0, blocks 1, 3, ...".
  std::string str() const;
};

/// Swaps the "mlp" child of every block `moe` chooses in `model` for an MoE layer of one
/// process, its weights drawn from the initialisation seed sequence as GPT-2's are (router
/// and fc1 N(0, 0.02), fc2 N(0, 0.02/√(2·n_layer)), biases 0), in model's dtype and on its
/// device. Parameter names: "transformer.h.1.mlp.router.weight",
/// "transformer.h.1.mlp.experts.3.fc1.weight", ... Throws when `moe` chooses no block.
void use_experts(nn::GPT& model, const MoEGptConfig& moe);

/// The MoE layers of `model`'s blocks (of a ParallelGpt's parts too), in block order.
std::vector<moe::MoE*> moe_layers(nn::Module& model);
/// After one process's step: each MoE layer's bias updated from the load of the forwards
/// since the last update (nothing where γ is 0).
void update_expert_biases(nn::Module& model);
/// Whether the parameter named `name` belongs to an expert (".mlp.experts." in the name).
bool is_expert_parameter(const std::string& name);

/// Parameters of a GPT with experts, split as EP splits them.
struct MoEParameterCount {
  std::int64_t dense = 0;    ///< held by every rank: embeddings, attention, norms, dense
                             ///< MLPs, routers
  std::int64_t experts = 0;  ///< all experts of all MoE layers: layers · E · (8C² + 5C)
  /// What one rank of an EP group of `ep` holds: dense + experts / ep.
  std::int64_t per_rank(int ep) const { return dense + experts / ep; }
};
/// The count by the formula: nn::GPTConfig::num_parameters() with each MoE block's MLP
/// (8C² + 5C) replaced by a router (E·C) and E experts.
MoEParameterCount moe_parameter_count(const nn::GPTConfig& config, const MoEGptConfig& moe);

}  // namespace mgpu::parallel::gpt
