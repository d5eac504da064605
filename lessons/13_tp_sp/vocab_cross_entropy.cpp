// Task 2: the vocabulary-parallel cross-entropy. The output head is column-parallel over
// the vocabulary, so each rank holds V/P columns of the logits. The loss needs a softmax
// over all V of them; this computes it from three numbers per row, never gathering the
// logits themselves (N·V values: with GPT-2's 50257 tokens, by far the largest activation).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace mgpu::parallel::tp {

std::int64_t padded_vocab(std::int64_t vocab, int tp) {
  MGPU_CHECK(vocab > 0 && tp > 0, "padded_vocab(", vocab, ", ", tp, ")");
  return (vocab + tp - 1) / tp * tp;
}

double vocab_parallel_cross_entropy(const Tensor& logits_r, const Tensor& labels, ShardRange range,
                                    std::int64_t real_vocab, dist::ProcessGroup& group, Tensor* grad) {
  MGPU_CHECK(logits_r.ndim() == 2 && logits_r.size(1) == range.size() && labels.ndim() == 1 &&
                 labels.size(0) == logits_r.size(0),
             "vocab_parallel_cross_entropy: logits ", logits_r.str(), ", labels ", labels.str(),
             ", range [", range.begin, ", ", range.end, ")");
  const std::int64_t N = logits_r.size(0), V = range.size();
  const std::vector<double> z = cast(logits_r, DType::f64).to_vector<double>();  // [N, V] row-major
  const std::vector<std::int64_t> y = labels.to_vector<std::int64_t>();
  for (std::int64_t t : y)
    MGPU_CHECK(t >= 0 && t < real_vocab, "vocab_parallel_cross_entropy: label ", t,
               " outside the vocabulary of ", real_vocab);
  // Columns [0, real) of this rank's slice are real tokens; the rest is padding.
  const std::int64_t real = std::clamp<std::int64_t>(real_vocab - range.begin, 0, V);
  // What you have: N, V, real, range; y (the N targets, global ids); z (this rank's logits,
  // f64, z[n·V + j] is token range.begin + j of row n); group: all_reduce(t,
  // dist::ReduceOp::max or ::sum) (in place; wait()), rank(), size(); cast(t, dtype);
  // logits_r.device(), logits_r.dtype(); Tensor::from_vector(values, shape, device) and
  // t.to_vector<double>() to move numbers in and out; std::exp, std::log, std::max and
  // std::numeric_limits<double>::infinity().
  // TODO(task2) BEGIN: chapter §2's cross-entropy without gathering the logits: the mean
  // over the N rows of log Σ_v exp(z_v) − z_target, the softmax over the whole (unpadded)
  // vocabulary, the same value on every rank, stable (§2: logits of ±20 and padding of 1000
  // give no overflow). Exactly two collectives on group, of O(N) values each: the logits
  // never travel. When grad is given, *grad [N, V] (logits_r's dtype and device) = the
  // loss's gradient with respect to this rank's columns (§2), 0 in the padding. Stuck:
  // tools/hint 13 2 (about 35 lines).
  MGPU_FAIL("TODO(task2): vocab_parallel_cross_entropy is not written yet ",
              "(lessons/13_tp_sp/vocab_cross_entropy.cpp); logits [", N, ", ", V, "] over ",
              group.size(), " rank(s), ", y.size(), " targets, ", real, " real columns, grad ",
              grad ? "wanted" : "not wanted", ", first logit ", z.empty() ? 0.0 : z[0]);
  // TODO(task2) END
}

}  // namespace mgpu::parallel::tp
