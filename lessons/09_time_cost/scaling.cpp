// Lesson 09, task 2: scaling efficiency, and the phases of one step from its timestamps.
//
// Scaling efficiency compares time per SAMPLE, not per step: with weak scaling (the
// per-rank batch fixed) N ranks do N times the work per step, with strong scaling (the
// global batch fixed) the same work in smaller pieces. Per sample, both ask the same
// question: did N devices make a sample N times cheaper?
#include <algorithm>

#include "mgpu/perf/time_cost.h"

namespace mgpu::perf {

double scaling_efficiency(const Run& one, const Run& n) {
  MGPU_CHECK(one.ranks == 1, "scaling_efficiency: the baseline must be a one-rank run, got ",
             one.ranks, " ranks");
  MGPU_CHECK(n.ranks >= 1, "scaling_efficiency: ranks must be >= 1, got ", n.ranks);
  MGPU_CHECK(one.global_batch > 0 && n.global_batch > 0, "scaling_efficiency: batches must be "
             "positive, got ", one.global_batch, " and ", n.global_batch);
  MGPU_CHECK(one.step_s > 0 && n.step_s > 0, "scaling_efficiency: step times must be positive, "
             "got ", one.step_s, " and ", n.step_s);
  // TODO(task2) BEGIN: the time per sample of each run (step_s over global_batch), then
  // E = T1 / (N * TN). (about 3 lines)
  throw Error("TODO(task2): scaling_efficiency is not written yet (lessons/09_time_cost/scaling.cpp)");
  // TODO(task2) END
}

Phases step_phases(const StepRecord& record) {
  Phases p;
  // TODO(task2) BEGIN: each phase's length(); exposed_comm from split_communication(
  // record.buckets, record.backward); other = the step's length minus the sum of the
  // rest. If other < -1e-9 the phases overlap: throw mgpu::Error (MGPU_CHECK) naming
  // the step's length and the sum; a smaller negative value is rounding: make it 0.
  // (about 15 lines)
  (void)record;
  throw Error("TODO(task2): step_phases is not written yet (lessons/09_time_cost/scaling.cpp)");
  // TODO(task2) END
  return p;
}

}  // namespace mgpu::perf
