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
  // What you have: p, v, m, rank; order; PipeOp{pass, micro, chunk}; Pass::backward,
  // Pass::forward; gpipe_order(p, m, rank) and one_f_one_b_order(p, m, rank) (lesson 03's
  // orders, v = 1).
  // TODO(task2) BEGIN: chapter §3's interleaved 1F1B order on pipeline rank `rank`: its
  // m·v forwards and m·v backwards, each (micro-batch, chunk) once each way, numbered,
  // warmed up, alternated and drained as §3 (Megatron-LM's order) describes, so that
  // p 2, v 2, m 4 on rank 0 is F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0
  // B2.1 B3.1 B2.0 B3.0 (Fj.c: micro-batch j through chunk c). Invariants: on each chunk a
  // micro-batch's forward before its backward; on the clock (simulate) no deadlock, a
  // bubble of exactly (p - 1)/(v·m), a span of 2·m·v + 2(p - 1), and no more forwards in
  // flight than §3's bound. Stuck: tools/hint 15 2 (about 20 lines).
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
