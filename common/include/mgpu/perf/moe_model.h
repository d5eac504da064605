/// @file moe_model.h
/// @brief A mixture-of-experts transformer for the planner (planner.h): which layers are MoE,
/// the parameters of each layer (all of them, and those one token uses), and the
/// expert-parallel all-to-all's bytes.
///
/// A model is lesson 12's GPT (learned positions, biases, LayerNorm, GELU MLP of 4C, tied
/// head) unless ModelShape says otherwise: a dense MLP hidden size, a gated (SwiGLU) MLP of
/// three matrices, no biases (RMSNorm, C values a norm), rotary positions (no table), an
/// untied head, another attention's parameters per layer (grouped-query attention, DeepSeek's
/// multi-head latent attention). An MoE layer's MLP is a router (E·C, as DeepSeek-V3 with
/// no bias), E routed experts and S shared experts, each an MLP of hidden size F_e.
///
///   a layer, all parameters   attention + norms + (dense MLP | router + (E + S)·expert)
///   a layer, one token's      attention + norms + (dense MLP | router + (k + S)·expert)
///   the model                 token table V·C (+ position table) + layers + final norm
///                             (+ the head V·C when untied)
///   active                    the same with the active layers: the parameters one token
///                             meets, the embedding table included as the model cards count
///
/// Expert parallelism (lesson 16): each of the ep ranks of a group holds E/ep routed experts;
/// each MoE layer runs 4 all-to-alls per micro-batch (dispatch and combine forward, their
/// mirrors backward), each of a rank's k·N tokens of C values: k·N·C·w bytes per rank, of
/// which (ep-1)/ep leave it (lesson 04's all-to-all: (P-1)α + (P-1)/P·n·β).
#pragma once

#include <cstdint>

#include "mgpu/perf/time_cost.h"  // Hardware

namespace mgpu::perf {

struct ModelShape;

/// The experts of an MoE model (experts = 0: a dense model).
struct MoeShape {
  std::int64_t experts = 0;         ///< E, routed experts per MoE layer (0: no MoE layer)
  std::int64_t top_k = 2;           ///< k, routed experts each token goes to
  std::int64_t shared_experts = 0;  ///< S, experts every token goes to (DeepSeek's shared expert)
  std::int64_t expert_hidden = 0;   ///< F_e, an expert MLP's hidden size (0: the dense MLP's)
  std::int64_t first_dense = 0;     ///< leading layers that stay dense (DeepSeek-V3: 3)
  std::int64_t every = 1;           ///< after those, every layer (1) or every other (2) is MoE
};

/// The all-to-all's time in a group of `size` ranks `stride` apart on `hw`, each rank's
/// buffer `bytes` bytes (lesson 04's pairwise exchange: p-1 messages of n/p bytes each).
/// Inside one node: (p-1)·α_intra + (p-1)/p·n·β_intra, lesson 04's formula. A group across
/// nodes has q of its ranks on each node: q-1 messages stay inside the node, p-q cross the
/// network, where every group of its kind exchanges at the same time, so a rank gets one
/// GPU's share of its node's network, inter_bw / gpus_per_node:
///   (p-1)·α_inter + n/p·((q-1)·β_intra + (p-q)·gpus_per_node/inter_bw).
/// 0 for one rank. Throws mgpu::Error for size or stride < 1.
double group_alltoall_seconds(const Hardware& hw, double bytes, int size, int stride);

/// Whether block `layer` (0-based) of `model` is an MoE layer.
bool is_moe_layer(const ModelShape& model, std::int64_t layer);

/// MoE layers among blocks [first, last) of `model`.
std::int64_t moe_layers_in(const ModelShape& model, std::int64_t first, std::int64_t last);

/// The attention's parameters in one block (with its biases, without the norms).
double attention_parameters(const ModelShape& model);

/// One MLP's parameters (with its biases when the model has them) of hidden size `hidden`.
double mlp_parameters(const ModelShape& model, double hidden);

/// The norms of one block: 2 LayerNorms (4C) or 2 RMSNorms (2C).
double block_norm_parameters(const ModelShape& model);

/// One block's parameters: all of them (active = false) or those one token uses (true).
double block_parameters(const ModelShape& model, std::int64_t layer, bool active);

/// The routed experts' parameters of one MoE block (E expert MLPs): what EP splits.
double routed_expert_parameters(const ModelShape& model);

/// Matrix parameters one token multiplies with in block `layer` (the FLOPs' count, 2 per
/// parameter forward): the attention's matrices and the MLPs it goes through.
double block_matmul_parameters(const ModelShape& model, std::int64_t layer);

}  // namespace mgpu::perf
