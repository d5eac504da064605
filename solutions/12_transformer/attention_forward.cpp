// Task 1: the attention core's forward. Every head of every sequence compares each
// position's query with the keys of the positions up to it, turns the scores into
// probabilities, and takes the weighted sum of those positions' values.
#include <cmath>

#include "mgpu/nn/attention.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor* probs) {
  detail::check_attention_operands("causal_attention", q, k, v);
  Tensor y;
  // What you have: q, k, v ([BH, T, D], one dtype and device; D = q.size(2)); probs (null,
  // or where the caller wants the probabilities); from mgpu/ops.h: matmul_batched(a, b,
  // trans_a, trans_b) -> [BH, M, N] (one product per head, op(a[i]) op(b[i])); permute(t,
  // dims); scale(t, alpha) (a new tensor) and scale_(t, alpha) (in place); softmax(t,
  // causal) (over the last axis, stable; with causal = true row t of a [.., T, T] tensor
  // sees columns 0..t only, the rest get exactly 0).
  // TODO(task1) BEGIN: chapter §3, task 1: the causal attention core of §3's three lines,
  // every one of the BH heads on its own. Invariants: position t never sees a later
  // position (changing k or v at s > t leaves y[·, t] unchanged); each row of p sums to 1;
  // large scores (|q·k| of 1e4) give finite values. Output y [BH, T, D]; and, when probs is
  // not null, *probs = p [BH, T, T], the probabilities, masked entries exactly 0. Stuck:
  // tools/hint 12 1 (about 5 lines).
  Tensor p = matmul_batched(q, k, false, true);  // scores [BH, T, T]
  scale_(p, 1.0 / std::sqrt(static_cast<double>(q.size(2))));
  p = softmax(p, /*causal=*/true);
  y = matmul_batched(p, v);  // [BH, T, D]
  if (probs) *probs = p;
  // TODO(task1) END
  return y;
}

}  // namespace mgpu::nn
