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
  // What you have: one and n (Run: ranks, global_batch, step_s); static_cast<double>.
  // TODO(task2) BEGIN: E(N) of chapter §3 for the run n against the one-rank run one (both
  // checked above), compared per SAMPLE, not per step, so that the one formula serves weak
  // and strong scaling: 1 for a perfect speed-up, 0.5 when N ranks train only N/2 times as
  // fast as one. Stuck: tools/hint 09 2 (about 3 lines).
  throw Error("TODO(task2): scaling_efficiency is not written yet (lessons/09_time_cost/scaling.cpp)");
  // TODO(task2) END
}

Phases step_phases(const StepRecord& record) {
  Phases p;
  // What you have: record (StepRecord: the Intervals step, data_wait, h2d, forward,
  // backward, optimizer, each with length(); buckets); p (Phases: one field per phase, all
  // 0 now; total()); MGPU_CHECK(condition, message parts...); split_communication(buckets,
  // compute) (task 1); std::max.
  // TODO(task2) BEGIN: chapter §3's phases of one step, in seconds: each measured phase's
  // length, the communication exposed outside backward (exposed_comm), and `other`, what
  // the rest leaves of the step, so that the phases add up to the step (p.total() is its
  // length). Phases that add up to more than the step overlap: an mgpu::Error naming the
  // step's length and their sum; 1 ns of rounding is tolerated and gives other = 0.
  // Stuck: tools/hint 09 2 (about 15 lines).
  (void)record;
  throw Error("TODO(task2): step_phases is not written yet (lessons/09_time_cost/scaling.cpp)");
  // TODO(task2) END
  return p;
}

}  // namespace mgpu::perf
