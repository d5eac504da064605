/// @file gpt_plan.h
/// @brief How a GPT is split over the ranks: a plan. As torchtitan does it, there is one
/// model definition (nn::GPT, lesson 12) and each parallelism is applied to it, never
/// written into a model of its own: the plan names the extent of each axis of the process
/// grid (grid.h: DP × CP × TP × PP) and each axis's options, and ParallelGpt
/// (parallel_gpt.h) applies it, giving each rank its part of the model.
///
///   TP (lesson 13): attention by heads, the MLP by features; optionally sequence
///      parallelism in the LayerNorm regions, with or without the re-gather
///   CP (lesson 14): each rank's positions of every sequence (plain or zigzag), attention
///      by ring attention (or the all-gather baseline, Ulysses' all-to-alls, or the ring x
///      Ulysses hybrid) on the heads its TP rank holds
///   PP (lesson 15): the blocks cut into stages (and virtual stages), a schedule, micro-batches
///   DP: the replicas' gradients averaged over the ranks that hold the same parameters
///      (the CP x DP ranks): by lesson 05's DDP while the backward runs, or once after it
///   EP (lesson 16): shape.ep consecutive data-parallel ranks split the experts of every
///      MoE layer (moe_gpt.h); each expert's gradient is summed over the ranks that hold it
///      and scaled as lesson 16's expert_grad_groups says, the dense ones averaged over the
///      data group. For now with DP and TP for attention (the MoE whole on every TP rank);
///      SP, CP and PP with experts are refused
///
/// A new dimension (zero-bubble schedules) is a new field here.
#pragma once

#include <cstdint>
#include <string>

#include "mgpu/nn/gpt.h"
#include "mgpu/parallel/cp/ring_attention.h"
#include "mgpu/parallel/grid/grid.h"
#include "mgpu/parallel/pp/pipe_schedule.h"
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::gpt {

/// How a vocabulary-sized layer is held over the TP group.
enum class Vocab {
  replicated,  ///< every TP rank the whole table (and, for the head, the whole logits)
  split,       ///< each TP rank its rows of the table padded to a multiple of TP (lesson 13)
};

/// The attention core of every block (attention_core.h).
enum class Attention {
  local,      ///< lesson 12's over the positions a rank holds (the whole sequence without CP)
  ring,       ///< lesson 14's ring over the CP group (a ring of one rank where CP is 1)
  allgather,  ///< lesson 14's baseline: K and V all-gathered over the CP group
  ulysses,    ///< lesson 14's Ulysses: all-to-alls over the CP group (TP·CP must divide H)
  hybrid,     ///< Ulysses over U consecutive CP ranks, the ring across the CP/U groups
              ///< (cp/hybrid_attention.h; TP·U must divide H)
};

/// How the gradients are averaged over the data group (grid.h's data_group()).
enum class GradSync {
  ddp,         ///< lesson 05's DistributedDataParallel: buckets all-reduced during the backward
  after_step,  ///< one all-reduce of every gradient after the backward has finished
};

/// The plan: the grid's extents and each axis's options.
struct GptPlan {
  grid::GridShape shape;                 ///< DP, TP, PP, CP extents (their product: the ranks)
                                         ///< and EP, within the data axis
  bool sequence_parallel = false;        ///< TP: the LayerNorm regions cut along T
  bool regather = false;                 ///< SP: the column inputs gathered again in the backward
  cp::Split split = cp::Split::zigzag;   ///< CP: which positions each rank holds
  Attention attention = Attention::local;  ///< the core; CP above 1 needs ring, allgather, ulysses or hybrid
  int ulysses_size = 0;                  ///< hybrid: U, the Ulysses group's ranks (0: ulysses_size_for's default)
  pp::ScheduleKind schedule = pp::ScheduleKind::one_f_one_b;  ///< PP: each rank's order
  int virtual_stages = 1;                ///< PP: model chunks per pipeline rank
  int micro_batches = 1;                 ///< PP: micro-batches per step
  Vocab embedding = Vocab::replicated;   ///< the token table on the first stage
  Vocab head = Vocab::split;             ///< the tied head and its loss on the last stage
  GradSync grad_sync = GradSync::after_step;  ///< DP

  /// One line: "DP 2 x TP 2 x PP 2, 1f1b, 1 chunk(s) per rank, 4 micro-batch(es), ...".
  std::string str() const;
  /// The hybrid's U: ulysses_size, or where it is 0 the largest U below CP dividing both CP
  /// and the heads of a TP rank (cp::default_ulysses_size; 1, the plain ring, if none does).
  int ulysses_size_for(const nn::GPTConfig& config) const;
  /// Throws, with one message naming the option and the fix, when the plan does not fit
  /// `config` or its options contradict each other (CP with the local core; SP with a CP
  /// core; Ulysses with TP·CP not dividing the heads; a hybrid U that does not divide CP, or
  /// with TP·U not dividing the heads; a Ulysses size without the hybrid; the re-gather without SP;
  /// DDP with a pipeline or micro-batches; a replicated head under a split embedding; more
  /// virtual stages than blocks; EP not dividing DP · CP). A TP that does not divide the
  /// heads is refused by lesson 13's head_shard when the blocks are cut.
  void check(const nn::GPTConfig& config) const;
  /// The same for a model with `moe_layers` MoE layers of `experts` experts each: EP above
  /// 1 needs MoE layers and an EP that divides E; a model with experts runs on DP, EP and
  /// TP for attention for now (the MoE then runs whole on every TP rank, its EP groups
  /// among the ranks of one TP coordinate): SP, CP, PP, micro-batches and DDP are refused,
  /// each with the fix.
  void check_experts(std::int64_t moe_layers, std::int64_t experts) const;
};

/// The blocks [begin, end) of virtual stage `stage` of `stages`: tp::shard_range's even
/// split of n_layer (the first stages one block longer). Throws when a stage would get no
/// block.
tp::ShardRange stage_blocks(std::int64_t n_layer, int stages, int stage);

/// The activations one rank's blocks keep for the backward, in bytes, by the chapters'
/// formulas (N = B·T tokens, H heads, P = TP): TP 3NC + 4N + (12NC + B·H·T²)/P values per
/// block; TP + SP 2NC + (13NC + 4N + B·H·T²)/P; with the re-gather (15NC + 4N + B·H·T²)/P.
/// Under a CP core (TP 1): 15·N_r·C + 4·N_r values per block and the ring's f64 result,
/// N_r·C + B·H·T_r (N_r = B·T_r, T_r = T/CP). `blocks`: the blocks this rank holds. Throws
/// for a CP core with TP (not derived).
double kept_bytes_formula(const GptPlan& plan, const nn::GPTConfig& config, std::int64_t B,
                          std::int64_t T, std::int64_t blocks, std::size_t value_bytes);

/// What one rank's CP attention core keeps for its backward per layer, in bytes, by lesson
/// 14's formula (§6): q, k, v, 3·N_r·C/TP values of `value_bytes`, and the f64 result with
/// its log-sum-exp, N_r·C/TP + B·(H/TP)·T_r values (N_r = B·T_r, T_r = T/CP). The same
/// under the ring, the all-gather, Ulysses and the hybrid (their head-sharded q, k, v and
/// result hold as many values as the sequence-sharded ones). 0 under the local core.
double attention_kept_bytes_formula(const GptPlan& plan, const nn::GPTConfig& config,
                                    std::int64_t B, std::int64_t T, std::size_t value_bytes);

/// The bytes one rank sends per layer over the CP group (and the hybrid's sub-groups), by
/// lesson 14's formulas (§7, §7a; N = B·T, C/TP the TP rank's features, s = `value_bytes`):
/// ring and all-gather K/V (P−1)/P·N·C·(4s + 2·8): K and V twice in s bytes, dK and dV in
/// f64 (the library's kernels sum them on the host), 6(P−1)/P·N·C·s where s is 8 (the
/// all-gather's and reduce-scatter's bytes counted as the ring's, dist/traffic.h); Ulysses
/// 8(P−1)/P²·N·C·s; the hybrid (U × R) 8(U−1)/(U·P)·N·C·s + (R−1)/P·N·C·(4s + 2·8).
/// 0 under the local core.
double cp_bytes_per_layer_formula(const GptPlan& plan, const nn::GPTConfig& config,
                                  std::int64_t B, std::int64_t T, std::size_t value_bytes);

/// The attention core lesson 14's --cp-kind names: "ring", "allgather", "ulysses" or
/// "hybrid". Throws for another name.
Attention attention_from_name(const std::string& name);

}  // namespace mgpu::parallel::gpt
