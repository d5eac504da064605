// Lesson 09, task 3: the alpha-beta-compute model against hand-computed steps.
#include <catch2/catch.hpp>

#include "mgpu/perf/time_cost.h"

using namespace mgpu;
using namespace mgpu::perf;

namespace {

// 1 ms forward and 2 ms backward per sample, 5 ms fixed; with batch 10: forward 10 ms,
// backward 20 ms. The link: alpha 1 ms, beta 1 us/B, so on 2 ranks a bucket of n bytes
// takes 2 ms + n us.
Workload three_buckets() {
  Workload w;
  w.forward_s_per_sample = 1e-3;
  w.backward_s_per_sample = 2e-3;
  w.fixed_s = 5e-3;
  w.bucket_bytes = {4000, 2000, 8000};
  w.bucket_ready = {0.25, 0.5, 1.0};
  return w;
}
const AlphaBeta kLink{1e-3, 1e-6};

}  // namespace

TEST_CASE("task3: one rank communicates nothing", "[09_time_cost][task3][points:1]") {
  const StepPrediction p = predict_step(three_buckets(), 10, 1, kLink);
  CHECK(p.comm_s == Approx(0).margin(1e-15));
  CHECK(p.exposed_s == Approx(0).margin(1e-15));
  CHECK(p.compute_s == Approx(0.030));
  CHECK(p.step_s == Approx(0.035));
  CHECK(p.samples_per_s == Approx(10 / 0.035));
}

TEST_CASE("task3: early buckets hide, the last one is exposed", "[09_time_cost][task3][points:2]") {
  // Backward starts at 0 and ends at 20 ms.
  //   bucket 0: ready 5,  takes 2 + 4 = 6  -> [5, 11]
  //   bucket 1: ready 10, channel busy until 11, takes 2 + 2 = 4 -> [11, 15]
  //   bucket 2: ready 20, takes 2 + 8 = 10 -> [20, 30]: exposed 10 ms
  const StepPrediction p = predict_step(three_buckets(), 10, 2, kLink);
  CHECK(p.comm_s == Approx(0.020));
  CHECK(p.exposed_s == Approx(0.010));
  CHECK(p.step_s == Approx(0.005 + 0.030 + 0.010));
  CHECK(p.samples_per_s == Approx(20 / 0.045));
}

TEST_CASE("task3: a bucket waits for the one before it", "[09_time_cost][task3][points:3]") {
  Workload w = three_buckets();
  w.bucket_bytes = {4000, 10000, 8000};
  // bucket 0 [5, 11]; bucket 1 ready 10, starts 11, takes 12 -> [11, 23];
  // bucket 2 ready 20 but the channel is busy: [23, 33] -> exposed 13 ms.
  const StepPrediction p = predict_step(w, 10, 2, kLink);
  CHECK(p.comm_s == Approx(0.028));
  CHECK(p.exposed_s == Approx(0.013));
  CHECK(p.step_s == Approx(0.048));
  // Everything in one bucket, ready at the end: nothing hides.
  Workload one;
  one.forward_s_per_sample = 1e-3;
  one.backward_s_per_sample = 2e-3;
  one.bucket_bytes = {22000};
  one.bucket_ready = {1.0};
  const StepPrediction q = predict_step(one, 10, 2, kLink);
  CHECK(q.exposed_s == Approx(0.024));
  CHECK(q.step_s == Approx(0.054));
  // Bad workloads are refused.
  CHECK_THROWS_AS(predict_step(w, 10, 0, kLink), Error);
  CHECK_THROWS_AS(predict_step(w, 0, 2, kLink), Error);
  w.bucket_ready = {0.25, 0.5};
  CHECK_THROWS_AS(predict_step(w, 10, 2, kLink), Error);
  w.bucket_ready = {0.5, 0.25, 1.0};
  CHECK_THROWS_AS(predict_step(w, 10, 2, kLink), Error);
  w.bucket_ready = {0.25, 0.5, 1.5};
  CHECK_THROWS_AS(predict_step(w, 10, 2, kLink), Error);
}

TEST_CASE("task3: more ranks, the ring's terms grow", "[09_time_cost][task3][points:2]") {
  // 4 ranks: a bucket takes 2*3*alpha + 2*3/4*n*beta = 6 ms + 1.5 n us.
  //   bucket 0 [5, 5+6+6 = 17]; bucket 1 ready 10 -> [17, 17+6+3 = 26];
  //   bucket 2 ready 20 -> [26, 26+6+12 = 44]: exposed 24 ms.
  const StepPrediction p = predict_step(three_buckets(), 10, 4, kLink);
  CHECK(p.comm_s == Approx(0.039));
  CHECK(p.exposed_s == Approx(0.024));
  CHECK(p.step_s == Approx(0.059));
  CHECK(p.samples_per_s == Approx(40 / 0.059));
  // A larger batch gives backward more time to hide behind: batch 40, backward 80 ms.
  //   bucket 0 ready 20 -> [20, 32]; bucket 1 ready 40 -> [40, 49]; bucket 2 ready 80 -> [80, 98].
  const StepPrediction big = predict_step(three_buckets(), 40, 4, kLink);
  CHECK(big.exposed_s == Approx(0.018));
  CHECK(big.step_s == Approx(0.005 + 0.120 + 0.018));
}
