// Task 2: pipeline schedules on a clock. A schedule says, for every tick and every stage,
// which micro-batch's forward or backward runs there. The naive one is the worked example;
// GPipe is the task.
#include "pipeline.h"

namespace mgpu::lesson03 {
namespace {

Schedule empty_schedule(const char* name, int num_stages, int num_micro, int num_ticks) {
  MGPU_CHECK(num_stages >= 1 && num_micro >= 1, name, ": need at least one stage and one "
             "micro-batch, got K = ", num_stages, ", M = ", num_micro);
  Schedule s;
  s.name = name;
  s.num_stages = num_stages;
  s.num_micro = num_micro;
  s.ticks.assign(static_cast<std::size_t>(num_ticks),
                 std::vector<std::optional<PipeOp>>(static_cast<std::size_t>(num_stages)));
  return s;
}

}  // namespace

Schedule naive_schedule(int num_stages, int num_micro) {
  const int K = num_stages, M = num_micro;
  Schedule s = empty_schedule("naive", K, M, 2 * K * M);
  // Micro-batch m owns ticks [2Km, 2K(m+1)): K forwards down the stages, K backwards up.
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) {
      s.ticks[2 * K * m + k][k] = PipeOp{Pass::forward, m};
      s.ticks[2 * K * m + K + (K - 1 - k)][k] = PipeOp{Pass::backward, m};
    }
  }
  return s;
}

Schedule gpipe_schedule(int num_stages, int num_micro) {
  const int K = num_stages, M = num_micro;
  Schedule s = empty_schedule("gpipe", K, M, 2 * (M + K - 1));
  // What you have: K stages, M micro-batches, 2 (M + K - 1) ticks; naive_schedule (above),
  // the worked example; s.ticks[t][k] (tick t, stage k) = PipeOp{Pass::forward or
  // Pass::backward, m}.
  // TODO(task2) BEGIN: chapter §3's GPipe table for any K and M: every micro-batch's forward
  // and backward on every stage, each once. Invariants: a slot holds one op; an op runs only
  // after its input was produced (check_schedule checks that); no stage idles between its
  // first and last forward, nor between its first and last backward; the idle slots are the
  // bubble, (K-1)/(M+K-1) of the table. Stuck: tools/hint 03 2 (about 6 lines).
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) {
      s.ticks[m + k][k] = PipeOp{Pass::forward, m};
      s.ticks[(M + K - 1) + (M - 1 - m) + (K - 1 - k)][k] = PipeOp{Pass::backward, m};
    }
  }
  // TODO(task2) END
  return s;
}

}  // namespace mgpu::lesson03
