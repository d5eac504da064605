// Task 4: the order in which one stage runs its ops under 1F1B
// (mgpu/parallel/pp/pipe_schedule.h: the library's pipelines run it too). GPipe runs every
// forward before the first backward, so every stage holds the activations of all M
// micro-batches at once. 1F1B starts a micro-batch's backward as soon as the pipeline
// allows, so a stage never holds more than the micro-batches still travelling below it.
#include <algorithm>

#include "mgpu/error.h"
#include "mgpu/parallel/pp/pipe_schedule.h"

namespace mgpu::parallel::pp {

std::vector<PipeOp> one_f_one_b_order(int p, int m, int rank) {
  const int K = p, M = m, k = rank;  // the chapter's names: K stages, M micro-batches, stage k
  MGPU_CHECK(K >= 1 && M >= 1 && k >= 0 && k < K, "one_f_one_b_order: need K >= 1, M >= 1 and "
             "0 <= stage < K, got K = ", K, ", M = ", M, ", stage = ", k);
  std::vector<PipeOp> order;
  // What you have: K, M, k; order.push_back(PipeOp{Pass::forward or Pass::backward, j})
  // for micro-batch j; std::min (<algorithm>).
  // TODO(task4) BEGIN: stage k's column of chapter §4b's 1F1B order, as a list of its 2M ops
  // in the order it runs them (one_f_one_b_schedule, given, puts the lists on the clock).
  // Invariants: forwards and backwards each go in micro-batch order, so a backward always
  // belongs to the oldest micro-batch still held; the stage never holds more than
  // min(K - k, M) micro-batches; on the clock the schedule passes check_schedule and takes
  // 2(M+K-1) ticks, as GPipe's. Stuck: tools/hint 03 4 (about 8 lines).
  const int warmup = std::min(K - 1 - k, M);
  int f = 0, b = 0;  // the next forward and the next backward
  for (; f < warmup; ++f) order.push_back({Pass::forward, f});
  while (f < M) {  // steady state: one forward, one backward
    order.push_back({Pass::forward, f++});
    order.push_back({Pass::backward, b++});
  }
  while (b < M) order.push_back({Pass::backward, b++});  // cool-down
  // TODO(task4) END
  return order;
}

}  // namespace mgpu::parallel::pp
