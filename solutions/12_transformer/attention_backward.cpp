// Task 2: the attention core's backward: the gradients of y = softmax(q kᵀ / √D, causal) v
// with respect to q, k and v, from dL/dy and what the forward kept.
#include <cmath>

#include "mgpu/nn/attention.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

AttentionGrads causal_attention_backward(const Tensor& grad_y, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& probs) {
  detail::check_attention_operands("causal_attention_backward", q, k, v);
  check_same_shape("causal_attention_backward", grad_y, q);
  AttentionGrads g;
  // What you have: grad_y = dL/dy, q, k, v ([BH, T, D]); probs = p ([BH, T, T], the
  // forward's, masked entries 0); g (AttentionGrads: dq, dk, dv, each [BH, T, D]); from
  // mgpu/ops.h: matmul_batched(a, b, trans_a, trans_b); mul(a, b) (elementwise); scale(t,
  // alpha) and scale_(t, alpha) (in place); softmax_backward(dL/dp, p) -> dL/dscores
  // (masked entries get 0).
  // TODO(task2) BEGIN: chapter §3, task 2: the gradients of task 1's core with respect to
  // q, k and v (§3's chain rule), each head on its own, from dL/dy and what the forward
  // kept. Invariants: dv[h, s] gathers dL/dy from every t >= s (the rows that saw s); a
  // masked score gets no gradient, so dk and dv at the last position come from the last
  // row only; every gradient matches central finite differences in f64. Output g.dq, g.dk,
  // g.dv. Stuck: tools/hint 12 2 (about 7 lines).
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  // y = p v: dp = dy vᵀ, dv = pᵀ dy.
  const Tensor dp = matmul_batched(grad_y, v, false, true);
  g.dv = matmul_batched(probs, grad_y, true, false);
  // p = softmax(s): ds; s = q kᵀ / √D: dq = ds k / √D, dk = dsᵀ q / √D.
  Tensor ds = softmax_backward(dp, probs);
  scale_(ds, inv_sqrt_d);
  g.dq = matmul_batched(ds, k);
  g.dk = matmul_batched(ds, q, true, false);
  // TODO(task2) END
  return g;
}

}  // namespace mgpu::nn
