// Lesson 09, task 2: scaling efficiency (weak and strong) and a step's phases.
#include <catch2/catch.hpp>

#include "mgpu/perf/time_cost.h"

using namespace mgpu;
using namespace mgpu::perf;

TEST_CASE("task2: weak scaling efficiency (per-rank batch fixed)", "[09_time_cost][task2][points:2]") {
  // 1 rank, batch 64: 100 ms per step. 4 ranks, batch 64 each (global 256): 125 ms.
  // Per sample 100/64 ms against 125/256 ms on 4 ranks: E = (100/64) / (4 * 125/256) = 0.8.
  CHECK(scaling_efficiency({1, 64, 0.100}, {4, 256, 0.125}) == Approx(0.8));
  // Same step time at any N: perfect weak scaling.
  CHECK(scaling_efficiency({1, 32, 0.050}, {3, 96, 0.050}) == Approx(1.0));
  CHECK(scaling_efficiency({1, 32, 0.050}, {1, 32, 0.050}) == Approx(1.0));
  // Twice the step time on 2 ranks: no gain at all.
  CHECK(scaling_efficiency({1, 32, 0.050}, {2, 64, 0.100}) == Approx(0.5));
}

TEST_CASE("task2: strong scaling efficiency (global batch fixed)", "[09_time_cost][task2][points:2]") {
  // Global batch 256: 400 ms on 1 rank; 4 ranks of 64 take 125 ms: E = 400 / (4 * 125) = 0.8.
  CHECK(scaling_efficiency({1, 256, 0.400}, {4, 256, 0.125}) == Approx(0.8));
  // Smaller per-rank batches can fit caches better: E > 1 happens and is not an error.
  CHECK(scaling_efficiency({1, 256, 0.400}, {2, 256, 0.180}) == Approx(0.4 / 0.36));
  CHECK_THROWS_AS(scaling_efficiency({2, 256, 0.4}, {4, 256, 0.1}), Error);  // not a 1-rank baseline
  CHECK_THROWS_AS(scaling_efficiency({1, 0, 0.4}, {4, 256, 0.1}), Error);
  CHECK_THROWS_AS(scaling_efficiency({1, 256, 0.4}, {4, 256, 0.0}), Error);
}

TEST_CASE("task2: a step's phases from its timestamps", "[09_time_cost][task2][points:2]") {
  // step [0, 100] ms: data wait [0, 5], h2d [5, 7], forward [7, 37], backward [37, 87],
  // buckets [60, 70] and [85, 92] (5 ms after backward), optimizer [93, 98].
  StepRecord r;
  r.step = {0.000, 0.100};
  r.data_wait = {0.000, 0.005};
  r.h2d = {0.005, 0.007};
  r.forward = {0.007, 0.037};
  r.backward = {0.037, 0.087};
  r.buckets = {{0.060, 0.070}, {0.085, 0.092}};
  r.optimizer = {0.093, 0.098};
  const Phases p = step_phases(r);
  CHECK(p.data_wait == Approx(0.005));
  CHECK(p.h2d == Approx(0.002));
  CHECK(p.forward == Approx(0.030));
  CHECK(p.backward == Approx(0.050));
  CHECK(p.exposed_comm == Approx(0.005));
  CHECK(p.optimizer == Approx(0.005));
  // 100 - (5 + 2 + 30 + 50 + 5 + 5) = 3 ms: the gaps [92, 93] and [98, 100].
  CHECK(p.other == Approx(0.003).margin(1e-12));
  CHECK(p.total() == Approx(r.step.length()));
  // Phases that did not happen are empty intervals: on the CPU, no copy to a device.
  r.h2d = {0.005, 0.005};
  CHECK(step_phases(r).h2d == 0);
  CHECK(step_phases(r).other == Approx(0.005));
}

TEST_CASE("task2: phases that add up to more than the step are refused", "[09_time_cost][task2][points:1]") {
  StepRecord r;
  r.step = {0, 1.0};
  r.forward = {0, 0.6};
  r.backward = {0.5, 1.0};  // overlaps forward by 0.1 s
  CHECK_THROWS_AS(step_phases(r), Error);
  // A nanosecond of rounding is not an error: other becomes 0.
  r.backward = {0.6, 1.0 + 1e-10};
  CHECK(step_phases(r).other == 0);
}
