// Task 2: the interleaved 1F1B schedule's order. With v model chunks per rank, a
// micro-batch passes every rank v times; the pipeline fills and drains in chunk-sized steps,
// and the bubble shrinks by v (at the price of v times as many point-to-point messages).
#include "mgpu/error.h"
#include "mgpu/parallel/pp/pipe_schedule.h"

namespace mgpu::parallel::pp {

std::vector<PipeOp> interleaved_order(int p, int v, int m, int rank) {
  MGPU_CHECK(p >= 1 && v >= 1 && m >= 1 && rank >= 0 && rank < p, "interleaved_order: rank ",
             rank, " of ", p, " pipeline rank(s), ", v, " chunk(s) each, ", m,
             " micro-batch(es): need p, v, m >= 1 and 0 <= rank < p");
  MGPU_CHECK(v == 1 || m % p == 0, "interleaved_order: ", m, " micro-batches do not split into ",
             "groups of p = ", p, " (the interleaved schedule runs each chunk on p micro-batches ",
             "at a time: make m a multiple of the pipeline ranks)");
  std::vector<PipeOp> order;
  // What you have: p, v, m, rank; PipeOp{pass, micro, chunk}; Pass::forward, Pass::backward.
  // TODO(task2) BEGIN: chapter §3's order. Number this rank's m·v forwards k = 0, 1, ...:
  // forward k is micro-batch (k / (p·v))·p + k % p through chunk (k % (p·v)) / p, and its
  // backward k the same micro-batch through chunk v - 1 - (k % (p·v)) / p. Warm-up:
  // min(2(p - 1 - rank) + (v - 1)·p, m·v) forwards; steady state: forward, backward,
  // forward, ... (the next forward, then the oldest backward) until no forward is left;
  // cool-down: the remaining backwards. Every op once; on each chunk a micro-batch's
  // forward before its backward (about 20 lines).
  const int total = m * v, group = p * v;
  auto forward = [&](int k) {
    return PipeOp{Pass::forward, (k / group) * p + k % p, (k % group) / p};
  };
  auto backward = [&](int k) {
    return PipeOp{Pass::backward, (k / group) * p + k % p, v - 1 - (k % group) / p};
  };
  int warmup = 2 * (p - 1 - rank) + (v - 1) * p;
  if (warmup > total) warmup = total;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int i = 0; i < total - warmup; ++i) {
    order.push_back(forward(warmup + i));
    order.push_back(backward(i));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(backward(k));
  // TODO(task2) END
  return order;
}

}  // namespace mgpu::parallel::pp
