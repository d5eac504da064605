// The planner's memory per rank (planner.h): the model states of the rank's stage and TP
// part (the ZeRO paper's count), and the activations its forwards in flight keep
// (Korthikanti et al.'s count per layer), both from training_memory.h.
#include <algorithm>

#include "mgpu/perf/planner.h"

namespace mgpu::perf {

double stage_parameters(const ModelShape& m, const Layout& l, int stage) {
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.vocab_size);
  // A block's parameters on one TP rank: the matrices and their biases cut, the LayerNorms
  // (4C) and the two row-parallel biases (2C) whole.
  const double block = (12 * C * C + 7 * C) / l.tp + 6 * C;
  double params = static_cast<double>(blocks_of_stage(m.n_layer, l.pp, stage)) * block;
  if (stage == 0) params += V * C + static_cast<double>(m.position_rows()) * C;  // token, position tables
  if (stage == l.pp - 1) params += 2 * C + (l.pp > 1 ? V * C : 0);  // ln_f; the tied table's copy
  return params;
}

MemoryEstimate estimate_memory(const ModelShape& m, const JobSettings& job, const Layout& l) {
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.vocab_size);
  const double T = static_cast<double>(m.seq), H = static_cast<double>(m.n_head);
  const double b = static_cast<double>(job.micro_batch), N = b * T;
  const double w = job.precision.value_bytes();
  const double micro = static_cast<double>(job.global_batch / (l.dp * job.micro_batch));
  ActivationSettings keep;
  keep.value_bytes = w;
  keep.dropout = job.dropout;
  keep.recompute = job.recompute;
  keep.flash = job.flash_attention;
  keep.sequence_parallel = job.sequence_parallel;
  const double block_act = layer_activation_bytes(T, b, C, H, l.tp, keep);
  const double v = job.schedule == "interleaved" ? job.virtual_stages : 1;
  MemoryEstimate best;
  for (int s = 0; s < l.pp; ++s) {
    const bool first = s == 0, last = s == l.pp - 1;
    const ModelStates states =
        model_state_bytes(stage_parameters(m, l, s), job.precision, job.zero_stage, l.dp);
    double in_flight = job.schedule == "gpipe" ? micro : std::min<double>(micro, l.pp - s);
    if (job.schedule == "interleaved") in_flight *= 1 + (l.pp - 1) / (l.pp * v);
    double act = static_cast<double>(blocks_of_stage(m.n_layer, l.pp, s)) * block_act * in_flight;
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
