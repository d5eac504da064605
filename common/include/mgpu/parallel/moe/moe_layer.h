/// @file moe_layer.h
/// @brief MoE: a Mixture-of-Experts layer, the transformer MLP's replacement, on one process
/// or under expert parallelism (the E experts split over an EP group of P ranks, L = E/P
/// each). It calls lesson 16's functions for every step that is the lesson's; it writes
/// only the glue: the router's product, the gathers and scatter-adds, the experts' products,
/// the combine and every backward.
///
///   x [N, M] -> router: logits = x W_r^T (f32, f64 for f64 x), probs = softmax(logits)
///     -> route_top_k (k experts per token, weights renormalised; bias steers the choice)
///     -> expert_capacity, capacity_slots (who is dropped) -> make_dispatch_plan
///     -> exchange_counts (1 all-to-all of counts) -> gather rows in the plan's order
///     -> to_experts (1 all-to-all) -> each local expert on its block (skipped when empty)
///     -> from_experts (1 all-to-all) -> y[n] = Σ_j weight[n, j] · row(n, j)
///
/// The backward mirrors it: two all-to-alls of row gradients (to_experts, from_experts), the
/// weights' gradient through the renormalisation to probs, the auxiliary loss's gradient,
/// softmax, the router's weight and input gradients. A dropped choice contributes 0 (the
/// residual connection around the layer carries its token); its weight is not given to the
/// other choices (GShard's top-2: the gates renormalised over the k choices, then capacity).
/// With k = 1 the weight is 1, where the Switch Transformer scales by the probability: the
/// router then learns through the auxiliary loss alone.
///
/// The router's product is the Switch Transformer's selective precision: its input cast to
/// f32 (Mixtral computes the logits in the model's dtype and the softmax in f32).
///
/// Where data meets the host: probs [N, E] are copied to the host once per forward (the
/// top-k, the auxiliary loss, the capacity and the plan are host code, as lesson 16 writes
/// them): on a GPU the forward waits for the router there. The counts go through one
/// all-to-all of an i64 CPU tensor (exchange_counts: the EP group must accept CPU tensors,
/// the mpi backend does). Everything else stays on x's device; the indices travel as host
/// vectors copied over (gathers and scatter-adds are nn::embedding and embedding_backward_).
///
/// The weights multiply the rows in the rows' dtype (cast from f64, as Hugging Face's Mixtral
/// casts its routing weights to the hidden states' dtype); the router's backward is in f32.
///
/// PyTorch has no MoE layer; this one follows the Switch Transformer and GShard (capacity,
/// drop order, auxiliary loss) and DeepSeek-V3 (the balancing bias). Differences: the
/// router has no noise or jitter, and the experts are GPT-2 MLPs (biases, GELU), not SwiGLU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/layer.h"
#include "mgpu/parallel/moe/expert_exchange.h"
#include "mgpu/parallel/moe/expert_mlp.h"

namespace mgpu::parallel::moe {

/// The sizes and the routing rule of an MoE layer.
struct MoEConfig {
  std::int64_t dim = 0;         ///< M, the model's width (input and output features)
  std::int64_t hidden = 0;      ///< F, each expert's hidden features
  std::int64_t experts = 0;     ///< E, experts in the layer (a multiple of the EP size)
  std::int64_t k = 2;           ///< experts per token, 1 <= k <= E
  double capacity_factor = 0;   ///< slots per expert = ceil(factor · N · k / E), over a
                                ///< rank's N tokens; <= 0: dropless (no choice dropped)
  double aux_alpha = 0;         ///< the Switch auxiliary loss's α (0: none); its gradient is
                                ///< added by backward, its value is in stats().aux_loss
  double bias_gamma = 0;        ///< DeepSeek-V3's bias update speed γ (0: no bias balancing)
  /// One line: "M=16 F=32 E=4 k=2 dropless aux=0.01 bias=0".
  std::string str() const;
};

/// What one forward routed, over this rank's tokens (and, for expert_rows, the rows this
/// rank's experts received from every rank of the EP group).
struct MoEStats {
  std::int64_t tokens = 0;                      ///< N, this rank's tokens
  std::int64_t capacity = -1;                   ///< slots per expert (-1: dropless)
  std::vector<std::int64_t> routed_per_expert;  ///< [E]: choices the router made for each
                                                ///< expert, before capacity (the load)
  std::vector<std::int64_t> tokens_per_expert;  ///< [E]: of them kept (the plan's counts)
  std::int64_t dropped = 0;                     ///< choices dropped by capacity
  std::int64_t tokens_all_dropped = 0;          ///< tokens whose every choice was dropped
                                                ///< (their output is 0)
  std::vector<std::int64_t> expert_rows;        ///< [L]: rows each local expert ran on
  std::int64_t rows_sent = 0;                   ///< rows this rank's dispatch sent (S)
  std::int64_t rows_received = 0;               ///< rows it received for its experts (R)
  double aux_loss = 0;                          ///< the auxiliary loss (0 when α = 0)
};

namespace detail {
/// The layer's "experts" child: this rank's experts, each named by its global index.
class ExpertList : public nn::Layer<ExpertList> {
 public:
  ExpertList() = default;
  /// Registers `expert` under its global index.
  void add(std::int64_t index, std::shared_ptr<ExpertMLP> expert);
  /// Local expert l.
  ExpertMLP& at(std::size_t l) { return static_cast<ExpertMLP&>(*child_at(l)); }
  /// Throws: the MoE layer runs each expert on its own rows.
  Tensor forward(const Tensor& x) override;
  /// Throws, as forward.
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override { return "ExpertList"; }
};

/// What an MoE forward keeps for its backward.
struct MoESaved {
  Shape shape;                        ///< the input's shape
  Tensor x_router;                    ///< [N, M]: x in the router's dtype
  Tensor w_router;                    ///< [E, M]: the router weight in that dtype
  Tensor probs;                       ///< [N, E]: the router's softmax
  Tensor aux_grad;                    ///< [N, E]: d aux / d probs (undefined: no aux)
  Tensor weights;                     ///< [N, k]: routing weights, router dtype
  Tensor inv_chosen;                  ///< [N, k]: 1 / Σ_j probs[n, e_j], for each j
  Tensor row_weight;                  ///< [S, M]: each sent row's weight, across the row
  Tensor back;                        ///< [S, M]: the experts' rows back, plan order
  std::vector<std::int64_t> row_token;   ///< [S]: token of send row i (order[i] / k)
  std::vector<std::int64_t> row_choice;  ///< [S]: choice of send row i (the plan's order)
  std::vector<std::int64_t> prob_index;  ///< [N·k]: n·E + e of choice (n, j)
  std::vector<std::int64_t> expert_rows; ///< [L]: rows of each local expert
  ExpertExchange exchange;            ///< the counts of the two all-to-alls
};
}  // namespace detail

/// The MoE layer: children "router" (Linear(M, E) without bias: weight [E, M], its product
/// computed by this layer in f32) and "experts" (this rank's experts, "experts.<e>.fc1.weight"
/// with e the global index, so that names match one process's). x [..., M] -> [..., M].
class MoE : public nn::Layer<MoE, detail::MoESaved> {
 public:
  /// One process: every expert here, the all-to-alls copies (a LocalGroup).
  explicit MoE(const MoEConfig& config);
  /// Expert parallelism over `ep_group` (P ranks, P divides E): this rank holds experts
  /// rank·L .. rank·L + L - 1. The router and every expert take the initialisation seeds
  /// one process's layer would (an expert held elsewhere skips its seeds), so after the same
  /// nn::manual_seed every rank's parameters equal one process's.
  MoE(const MoEConfig& config, std::shared_ptr<dist::ProcessGroup> ep_group);

  /// x [..., M] -> y [..., M]; the routing's statistics in stats(). In training mode it
  /// keeps what backward needs and adds the choices to load_since_update(). Every rank of
  /// the EP group calls it together (three all-to-alls).
  Tensor forward(const Tensor& x) override;
  /// dy [..., M] -> dx [..., M] (undefined when !input_requires_grad()); adds the router's
  /// gradient (with the auxiliary loss's part when aux_alpha > 0) and this rank's experts'
  /// (from every rank's tokens routed to them) and fires their grad-ready hooks, an expert
  /// that received no rows included. Every rank of the EP group calls it together (two
  /// all-to-alls, or one without dx).
  Tensor backward(const Tensor& grad_out) override;
  /// "MoE(M=.. F=.. E=.. k=.. ..., ep=P, experts a..b here)".
  std::string describe() const override;

  /// The configuration.
  const MoEConfig& config() const { return config_; }
  /// The EP group (a LocalGroup on one process).
  dist::ProcessGroup& ep_group() const { return *group_; }
  /// L = E/P, the experts on this rank.
  std::int64_t local_experts() const { return config_.experts / group_->size(); }
  /// The global index of this rank's first expert.
  std::int64_t first_expert() const { return group_->rank() * local_experts(); }
  /// The router's weight [E, M] ("router.weight").
  nn::Parameter& router_weight();
  /// This rank's local expert l (global index first_expert() + l).
  ExpertMLP& local_expert(std::int64_t l);

  /// The routing of the latest forward (training or not).
  const MoEStats& stats() const { return stats_; }

  /// The balancing bias [E] added to the scores for selection only (zeros at the start).
  const std::vector<double>& expert_bias() const { return bias_; }
  /// Sets the bias (a checkpoint's); the same on every rank. Throws unless E long.
  void set_expert_bias(std::vector<double> bias);
  /// The load (choices per expert) of the training forwards since the last update, this
  /// rank's tokens.
  const std::vector<std::int64_t>& load_since_update() const { return load_; }
  /// After a step: sums load_since_update() over the EP group (one all-reduce of an i64
  /// CPU tensor), then update_expert_bias(bias, load, bias_gamma) and starts a new count.
  /// Every rank of the group calls it. Does nothing when bias_gamma is 0.
  void update_bias();
  /// The same, with the load summed over `load_group` instead: under EP × DP the whole
  /// world, so that every replica keeps one bias.
  void update_bias(dist::ProcessGroup& load_group);

 private:
  using Saved = detail::MoESaved;
  detail::ExpertList& experts();

  MoEConfig config_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::vector<double> bias_;
  std::vector<std::int64_t> load_;
  MoEStats stats_;
};

}  // namespace mgpu::parallel::moe
