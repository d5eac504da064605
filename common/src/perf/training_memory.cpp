// Model states (the ZeRO paper) and a transformer layer's activations (Korthikanti et al.):
// the published formulas of mgpu/perf/training_memory.h.
#include "mgpu/error.h"
#include "mgpu/perf/training_memory.h"

namespace mgpu::perf {

ModelStates model_state_bytes(double params, const Precision& p, int zero_stage, int dp) {
  MGPU_CHECK(p.name == "fp32" || p.name == "bf16" || p.name == "fp16", "precision '", p.name,
             "' (fp32, bf16 or fp16)");
  MGPU_CHECK(zero_stage >= 0 && zero_stage <= 3, "ZeRO stage ", zero_stage, " (0 to 3)");
  MGPU_CHECK(dp >= 1, "model states over ", dp, " data-parallel ranks");
  ModelStates s;
  s.parameters = p.value_bytes() * params;
  s.gradients = p.grad_bytes() * params;
  s.optimizer = p.optimizer_bytes() * params;
  // Each stage shards one more state over the replicas: 1 the optimizer, 2 the gradients,
  // 3 the weights (gathered again, a unit at a time, when a forward or backward needs them).
  if (zero_stage >= 1) s.optimizer /= dp;
  if (zero_stage >= 2) s.gradients /= dp;
  if (zero_stage >= 3) s.parameters /= dp;
  return s;
}

double layer_activation_bytes(double s, double b, double h, double a, int t,
                              const ActivationSettings& k) {
  MGPU_CHECK(k.recompute == "none" || k.recompute == "selective" || k.recompute == "full",
             "recompute '", k.recompute, "' (none, selective or full)");
  MGPU_CHECK(t >= 1, "activations on ", t, " TP ranks");
  const double w = k.value_bytes, mask = k.dropout ? 1 : 0, tp = t;
  const double sbh = s * b * h;
  // Full recomputation keeps the layer's input and runs the forward again in the backward.
  if (k.recompute == "full") return w * sbh / (k.sequence_parallel ? tp : 1);
  // Kept whole on every TP rank (unless SP splits them along the sequence): the two
  // LayerNorms' inputs, the QKV and first MLP products' inputs, the two dropout masks.
  const double whole = 4 * w + 2 * mask;
  // Split by TP (heads, or the MLP's 4h columns): Q, K, V, the output projection's input
  // (h wide each), GELU's input and output (4h wide each): 12 values of h.
  const double split = 12 * w;
  double bytes = sbh * (whole / (k.sequence_parallel ? tp : 1) + split / tp);
  if (k.flash) return bytes + 4 * a * s * b / tp;  // the softmax's log-sum-exp, fp32
  if (k.recompute == "selective") return bytes;    // the a·s² core recomputed
  // The scores, a·s² per sequence split by heads: the softmax's output, and with dropout
  // its mask (1 byte) and its output, which the product with V reads.
  const double scores = w + mask * (1 + w);
  return bytes + scores * a * s * s * b / tp;
}

}  // namespace mgpu::perf
