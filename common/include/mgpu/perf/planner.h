/// @file planner.h
/// @brief Which DP x TP x PP layout to train a GPT with: the memory each layout needs per
/// rank and the step time it is predicted to take, best first.
///
/// The planner puts the course's formulas and the published ones side by side, for lesson
/// 12's GPT on `gpus` ranks split into dp x tp x pp (tensor parallelism innermost on
/// consecutive ranks, then data parallelism, then the pipeline outermost: Megatron-LM's
/// order, so that the chattiest group stays inside a node). JobSettings says how the run
/// stores its numbers: fp32 as the library trains, or bf16/fp16 with fp32 master weights;
/// ZeRO stage 0-3 over DP; recomputation none, selective or full; flash attention or not
/// (training_memory.h holds those formulas and their sources). w below is a value's bytes
/// (4 or 2), g a gradient's.
///
///   memory per rank, the largest stage:
///     model states  model_state_bytes (the ZeRO paper) of the stage's parameters on one TP
///                   rank: blocks of the stage x ((12C² + 7C)/tp + 6C) (lesson 13's split:
///                   the matrices and their biases cut by tp), + the embeddings V·C + P·C
///                   on the first stage (P: the position table's rows), + ln_f and a copy
///                   of the tied table on the last (the two coincide when pp = 1)
///     activations   layer_activation_bytes (Korthikanti et al.) per block and micro-batch
///                   of N = b·T tokens (+ with dropout the embedding's mask, N·C bytes,
///                   / tp under SP, on the first stage), times the micro-batches a stage
///                   keeps: m (GPipe), pp - stage (1F1B),
///                   1F1B's x (1 + (pp-1)/(pp·v)) (interleaved); + the logits and their
///                   probabilities 2·N·V·w/tp on the last stage (m of them under GPipe)
///
///   step time (lesson 09's alpha-beta model, lesson 03's bubble):
///     t_mb    one micro-batch through the slowest stage: its FLOPs / the device's FLOP/s,
///             plus TP's 4 all-reduces of N·C·w bytes per block (2 forward, 2 backward;
///             SP's all-gathers and reduce-scatters cost the same). FLOPs per token and
///             block, / tp: forward 24C² + 4TC, backward twice that, + the forward again
///             under full recomputation, + the attention core's 4TC under selective, +
///             flash attention's 2TC (QKᵀ recomputed in its backward); the head's 2CV
///             forward and 4CV backward on the last stage
///     compute m·t_mb, bubble (pp-1)/v·t_mb (m = micro-batches per replica per step)
///     pp      2 (m + pp - 2) point-to-point messages of N·C·w bytes (activations forward,
///             their gradients backward), + the tied table's gradient all-reduce between
///             the first and the last stage
///     dp      over the stage's parameters Ψ, with RS(n) = AG(n) = half a ring all-reduce:
///               ZeRO-0 (DDP)  all-reduce of Ψ·g, once a step
///               ZeRO-1        RS(Ψ·g) + AG(Ψ·w) once a step: DDP's bytes when g = w
///               ZeRO-2        RS(Ψ·g) after every micro-batch (the gradients are
///                             sharded, so they cannot accumulate whole) + AG(Ψ·w)
///               ZeRO-3        every micro-batch: AG(Ψ·w) in its forward and again in its
///                             backward, RS(Ψ·g): 1.5x DDP's bytes for one micro-batch
///             all after the last micro-batch, not hidden
///     fixed   the device's per-step floor
///
/// A group's link: inside one node (its ranks within gpus_per_node consecutive ranks),
/// alpha = intra_latency_s and beta = 1/intra_busbw. A group across nodes shares each
/// node's network with the other groups of its kind, which communicate at the same time:
/// each GPU's share is inter_bw / gpus_per_node, and a group with k ranks on each node
/// gets k shares (lesson 09's effective_link on a network of k shares). The model ignores
/// that DP's communication could hide behind the last micro-batches' backward, and that
/// TP's could hide behind the products.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/perf/link_model.h"
#include "mgpu/perf/time_cost.h"
#include "mgpu/perf/training_memory.h"

namespace mgpu::perf {

/// The transformer (lesson 12's GPT; the fields of nn::GPTConfig).
struct ModelShape {
  std::int64_t vocab_size = 65;  ///< V, tokens
  std::int64_t seq = 128;        ///< T, tokens per sequence
  std::int64_t n_layer = 4;      ///< L, blocks
  std::int64_t n_head = 4;       ///< H, attention heads
  std::int64_t n_embd = 128;     ///< C
  /// Rows of the position table (nn::GPTConfig's block_size; 0: seq). A model trained on
  /// windows shorter than its context keeps the whole table.
  std::int64_t positions = 0;
  /// Rows of the position table: positions, or seq when that is 0. A sequence longer than
  /// this has no positions: the model's context.
  std::int64_t position_rows() const { return positions > 0 ? positions : seq; }
  /// Parameters of the whole model (embeddings, blocks, ln_f; the head is tied).
  std::int64_t parameters() const;
};

/// How a step runs: the batch, the micro-batches, the schedule, the sharding.
struct JobSettings {
  std::int64_t global_batch = 8;  ///< sequences per optimizer step, all replicas together
  std::int64_t micro_batch = 1;   ///< b, sequences per micro-batch (pipeline and not)
  Precision precision;            ///< fp32 (the library's) or bf16/fp16, fp32 master weights
  int zero_stage = 1;             ///< ZeRO over DP: 0 DDP, 1 optimizer (lesson 10), 2 + grads, 3 + weights
  std::string recompute = "none"; ///< "none", "selective" or "full" (lesson 12's recomputation)
  bool flash_attention = false;   ///< the attention scores never kept (FlashAttention)
  bool dropout = false;           ///< dropout masks kept (the library's GPT has no dropout)
  bool sequence_parallel = false; ///< SP inside the TP group (lesson 13)
  std::string schedule = "1f1b";  ///< "gpipe", "1f1b" or "interleaved"
  int virtual_stages = 1;         ///< v, model chunks per rank (interleaved only)
};

/// The machine: lesson 09's cluster (ranks and links) plus each GPU's memory and speed.
struct Cluster {
  Hardware hardware;           ///< nodes, GPUs per node, the links inside and between nodes
  double memory_bytes = 0;     ///< memory of one GPU (0: unknown, every layout fits)
  double flops = 0;            ///< FLOP/s one GPU sustains on the model's products
  double step_floor_s = 0;     ///< per step whatever the layout (launches, optimizer)
  /// Devices the ranks' compute really runs on (0: one per rank). Fewer than the ranks
  /// (ranks sharing CPU cores) slows each rank's compute by ranks / compute_devices.
  double compute_devices = 0;
};

/// A layout of the ranks: dp x tp x pp = the number of ranks.
struct Layout {
  int dp = 1;  ///< data-parallel replicas
  int tp = 1;  ///< tensor-parallel ranks per stage
  int pp = 1;  ///< pipeline stages
  /// "DP2 x TP2 x PP1".
  std::string str() const;
};

/// Bytes one rank keeps (the largest stage's).
struct MemoryEstimate {
  int stage = 0;              ///< which stage is the largest
  double parameters = 0;      ///< the weights the forward uses (this rank's share under ZeRO-3)
  double gradients = 0;       ///< the gradients (this rank's share under ZeRO-2 and -3)
  double optimizer = 0;       ///< AdamW's moments, + the fp32 master weights in mixed precision
  double activations = 0;     ///< what the forwards in flight keep for their backwards
  /// The sum.
  double total() const { return parameters + gradients + optimizer + activations; }
};

/// A step's predicted time, part by part (seconds).
struct TimeEstimate {
  std::int64_t micro_batches = 1;  ///< m, per replica per step
  double compute_s = 0;   ///< m micro-batches' forward and backward on the slowest stage
  double tp_comm_s = 0;   ///< TP's all-reduces of those m micro-batches
  double bubble_s = 0;    ///< the pipeline's fill and drain: (pp-1)/v micro-batch times
  double pp_comm_s = 0;   ///< activations and their gradients between stages, tied table
  double dp_comm_s = 0;   ///< DP's collectives: the gradients' reduction, ZeRO's all-gathers
  double fixed_s = 0;     ///< the per-step floor
  /// The sum.
  double step_s() const {
    return compute_s + tp_comm_s + bubble_s + pp_comm_s + dp_comm_s + fixed_s;
  }
};

/// One layout's verdict.
struct PlanEntry {
  Layout layout;            ///< the layout
  MemoryEstimate memory;    ///< per rank
  TimeEstimate time;        ///< per step
  bool fits = false;        ///< memory.total() <= the GPU's memory
  bool tie = false;         ///< fits, and within the stated error of the fastest (mark_ties)
};

/// Every layout dp x tp x pp = gpus the model allows: tp divides the heads, pp is at most
/// the blocks, dp·micro_batch divides the global batch. In the order dp, then tp, then pp
/// descending. Throws mgpu::Error for gpus < 1, a model that cannot exist (a size below 1,
/// C not a multiple of the heads, a sequence past the position table's rows) or a job
/// that cannot run (global batch or micro-batch < 1, an unknown schedule, precision or
/// recomputation, v < 1, a ZeRO stage outside 0-3).
std::vector<Layout> candidate_layouts(int gpus, const ModelShape& model, const JobSettings& job);

/// Blocks stage `stage` of `pp` holds (numpy's array_split: the first L % pp stages one more).
std::int64_t blocks_of_stage(std::int64_t n_layer, int pp, int stage);

/// Parameters one TP rank of stage `stage` holds (the model states' formula above).
double stage_parameters(const ModelShape& model, const Layout& layout, int stage);

/// The memory formula above for one layout.
MemoryEstimate estimate_memory(const ModelShape& model, const JobSettings& job, const Layout& layout);

/// The link a group of `size` ranks `stride` apart sees on `hw` (zero cost for one rank).
AlphaBeta group_link(const Hardware& hw, int size, int stride);

/// The time formula above for one layout on `cluster`.
TimeEstimate estimate_time(const ModelShape& model, const JobSettings& job, const Cluster& cluster,
                           const Layout& layout);

/// Every candidate layout on cluster.hardware.ranks() ranks, estimated: those that fit
/// first, fastest first; then those that do not, smallest memory first.
std::vector<PlanEntry> plan_layouts(const ModelShape& model, const JobSettings& job,
                                    const Cluster& cluster);

/// Marks `tie` on each fitting entry whose step time is within `relative_error` (0.1:
/// 10%) of the fastest fitting entry's, that one included when another ties with it: the
/// model cannot tell them apart. Returns how many are marked (0 when none ties).
int mark_ties(std::vector<PlanEntry>& plan, double relative_error);

/// A cluster of lesson 09's hardware file (lessons/09_time_cost/hardware.json): the entry of
/// "hardware" called `name`, with the file's "device" (sustained_tflops, step_floor_ms and,
/// when present, memory_gib and compute_devices). `memory_gib` > 0 overrides the file's
/// memory. Throws
/// mgpu::Error naming the file for a missing entry or field, listing the names there are.
Cluster read_cluster(const std::string& path, const std::string& name, double memory_gib = 0);

}  // namespace mgpu::perf
