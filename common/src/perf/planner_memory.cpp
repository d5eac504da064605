// The planner's memory per rank (planner.h): the model states of the rank's stage and TP
// part (the ZeRO paper's count), and the activations its forwards in flight keep
// (Korthikanti et al.'s count per layer), both from training_memory.h; an MoE block's
// routed experts split over EP and sharded over the expert-data group.
#include <algorithm>

#include "mgpu/perf/planner.h"

namespace mgpu::perf {

namespace {

// The first block of stage `stage` (blocks_of_stage's split).
std::int64_t first_block_of_stage(std::int64_t n_layer, int pp, int stage) {
  std::int64_t first = 0;
  for (int s = 0; s < stage; ++s) first += blocks_of_stage(n_layer, pp, s);
  return first;
}

// Bytes block `layer` keeps for its backward on one TP rank: Korthikanti et al.'s count
// (training_memory.h) with its MLP part (GELU's input and output, 4C wide: 8·w·N) replaced
// by the model's MLP: 2 (3 gated) values of the hidden size per token, and in an MoE block
// the k routed and S shared experts' of F_e, the k copies of each token dispatched (C
// values, whole on every TP rank) and the router's E probabilities in fp32.
double block_activations_kept(const ModelShape& m, const JobSettings& job, int tp,
                              std::int64_t layer) {
  const double C = static_cast<double>(m.n_embd), T = static_cast<double>(m.seq);
  const double b = static_cast<double>(job.micro_batch), N = b * T;
  const double w = job.precision.value_bytes();
  ActivationSettings keep;
  keep.value_bytes = w;
  keep.dropout = job.dropout;
  keep.recompute = job.recompute;
  keep.flash = job.flash_attention;
  keep.sequence_parallel = job.sequence_parallel;
  const double gpt = layer_activation_bytes(T, b, C, static_cast<double>(m.n_head), tp, keep);
  if (job.recompute == "full") return gpt;  // the block's input alone
  const double values = m.gated_mlp ? 3 : 2;  // per hidden unit: GELU in/out; gate, up, product
  const double dense_f = m.ffn_hidden > 0 ? static_cast<double>(m.ffn_hidden) : 4 * C;
  const double expert_f =
      m.moe.expert_hidden > 0 ? static_cast<double>(m.moe.expert_hidden) : dense_f;
  const double attention_part = gpt - 8 * w * N * C / tp;
  if (!is_moe_layer(m, layer)) return attention_part + values * dense_f * w * N / tp;
  const double k = static_cast<double>(m.moe.top_k), S = static_cast<double>(m.moe.shared_experts);
  return attention_part + k * N * C * w + (k + S) * N * values * expert_f * w / tp +
         N * static_cast<double>(m.moe.experts) * 4;
}

}  // namespace

double stage_parameters(const ModelShape& m, const Layout& l, int stage) {
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.vocab_size);
  // A block's parameters on one TP rank: the matrices and their biases cut, the norms and
  // the two row-parallel biases (2C) whole. Lesson 12's GPT: (12C² + 7C)/tp + 6C. The routed
  // experts are stage_expert_parameters'.
  const double whole = block_norm_parameters(m) + (m.biases ? 2 * C : 0);
  const std::int64_t first = first_block_of_stage(m.n_layer, l.pp, stage);
  double params = 0;
  for (std::int64_t b = first; b < first + blocks_of_stage(m.n_layer, l.pp, stage); ++b) {
    const double block =
        block_parameters(m, b, false) - (is_moe_layer(m, b) ? routed_expert_parameters(m) : 0);
    params += (block - whole) / l.tp + whole;
  }
  if (stage == 0) params += V * C + (m.rotary ? 0 : static_cast<double>(m.position_rows()) * C);
  // The final norm; the tied table's copy (pp > 1) or the untied head.
  if (stage == l.pp - 1)
    params += block_norm_parameters(m) / 2 + (l.pp > 1 || !m.tied_head ? V * C : 0);
  return params;
}

double stage_expert_parameters(const ModelShape& m, const Layout& l, int stage) {
  const std::int64_t first = first_block_of_stage(m.n_layer, l.pp, stage);
  const double moe =
      static_cast<double>(moe_layers_in(m, first, first + blocks_of_stage(m.n_layer, l.pp, stage)));
  return moe * routed_expert_parameters(m) / (static_cast<double>(l.ep) * l.tp);
}

MemoryEstimate estimate_memory(const ModelShape& m, const JobSettings& job, const Layout& l) {
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.vocab_size);
  const double T = static_cast<double>(m.seq);
  const double b = static_cast<double>(job.micro_batch), N = b * T;
  const double w = job.precision.value_bytes();
  const double micro = static_cast<double>(job.global_batch / (l.dp * job.micro_batch));
  const double v = job.schedule == "interleaved" ? job.virtual_stages : 1;
  MemoryEstimate best;
  for (int s = 0; s < l.pp; ++s) {
    const bool first = s == 0, last = s == l.pp - 1;
    // Dense states over all dp replicas; the routed experts' over the dp/ep replicas that
    // hold the same experts (the expert-data group).
    ModelStates states =
        model_state_bytes(stage_parameters(m, l, s), job.precision, job.zero_stage, l.dp);
    const ModelStates experts = model_state_bytes(stage_expert_parameters(m, l, s), job.precision,
                                                  job.zero_stage, l.dp / l.ep);
    states.parameters += experts.parameters;
    states.gradients += experts.gradients;
    states.optimizer += experts.optimizer;
    double in_flight = job.schedule == "gpipe" ? micro : std::min<double>(micro, l.pp - s);
    if (job.schedule == "interleaved") in_flight *= 1 + (l.pp - 1) / (l.pp * v);
    const std::int64_t first_block = first_block_of_stage(m.n_layer, l.pp, s);
    double act = 0;
    const std::int64_t end_block = first_block + blocks_of_stage(m.n_layer, l.pp, s);
    for (std::int64_t blk = first_block; blk < end_block; ++blk)
      act += block_activations_kept(m, job, l.tp, blk) * in_flight;
    // The embedding's output is the first block's input (counted there); with dropout its
    // mask, 1 byte a value (Korthikanti et al.'s s·b·h·p/t under SP).
    if (first && job.dropout) act += N * C / (job.sequence_parallel ? l.tp : 1) * in_flight;
    if (last) act += 2 * N * V * w / l.tp * (job.schedule == "gpipe" ? micro : 1);  // logits, probabilities
    MemoryEstimate e;
    e.stage = s;
    e.parameters = states.parameters;
    e.gradients = states.gradients;
    e.optimizer = states.optimizer;
    e.activations = act;
    if (s == 0 || e.total() > best.total()) best = e;
  }
  return best;
}

}  // namespace mgpu::perf
