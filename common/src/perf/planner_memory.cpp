// The planner's memory per rank (planner.h): parameters, gradients and AdamW's moments of
// the rank's stage and TP part, and the activations its forwards in flight keep.
#include <algorithm>

#include "mgpu/perf/planner.h"

namespace mgpu::perf {

MemoryEstimate estimate_memory(const ModelShape& m, const JobSettings& job, const Layout& l) {
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.vocab_size);
  const double T = static_cast<double>(m.seq), H = static_cast<double>(m.n_head);
  const double tp = l.tp, b = static_cast<double>(job.micro_batch), N = b * T;
  const double micro = static_cast<double>(job.global_batch / (l.dp * job.micro_batch));
  // A block's parameters on one TP rank: the matrices and their biases cut, the LayerNorms
  // (4C) and the two row-parallel biases (2C) whole.
  const double block_params = (12 * C * C + 7 * C) / tp + 6 * C;
  // What one block keeps per micro-batch, in values (lesson 13's count).
  const double block_act = job.sequence_parallel
                               ? 2 * N * C + (13 * N * C + 4 * N + b * H * T * T) / tp
                               : 3 * N * C + 4 * N + (12 * N * C + b * H * T * T) / tp;
  const double v = job.schedule == "interleaved" ? job.virtual_stages : 1;
  MemoryEstimate best;
  for (int s = 0; s < l.pp; ++s) {
    const bool first = s == 0, last = s == l.pp - 1;
    double params = static_cast<double>(blocks_of_stage(m.n_layer, l.pp, s)) * block_params;
    if (first) params += V * C + static_cast<double>(m.position_rows()) * C;                 // token and position tables
    if (last) params += 2 * C + (l.pp > 1 ? V * C : 0);  // ln_f; the tied table's copy
    double in_flight = job.schedule == "gpipe" ? micro : std::min<double>(micro, l.pp - s);
    if (job.schedule == "interleaved") in_flight *= 1 + (l.pp - 1) / (l.pp * v);
    double act = static_cast<double>(blocks_of_stage(m.n_layer, l.pp, s)) * block_act * in_flight;
    if (first) act += N * C * in_flight;  // the embedding's output
    if (last) act += 2 * N * V / tp * (job.schedule == "gpipe" ? micro : 1);  // logits, probabilities
    MemoryEstimate e;
    e.stage = s;
    e.parameters = 4 * params;
    e.gradients = 4 * params;
    e.optimizer = 8 * params / (job.zero1 ? l.dp : 1);
    e.activations = 4 * act;
    if (s == 0 || e.total() > best.total()) best = e;
  }
  return best;
}

}  // namespace mgpu::perf
