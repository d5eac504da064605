// Lesson 08, task 1: the loss scale's update rule, alone and inside the scaler.
#include <cfloat>

#include "mp_test_util.h"
#include "scale_update_sequence.h"

using namespace mptest;

TEST_CASE("task1: interval 3: clean, clean, inf, clean, clean, clean -> PyTorch's scales",
          "[08_mixed_precision][task1][points:2]") {
  mgpu::testing::check_interval_3_sequence();
}

TEST_CASE("task1: a scale near the float maximum never becomes inf",
          "[08_mixed_precision][task1][points:1]") {
  float scale = std::ldexp(1.f, 127);  // doubling gives 2^128: inf in float
  std::int32_t tracker = 0;
  amp::update_scale(scale, tracker, false, 2.0, 0.5, 1);
  CHECK(scale == std::ldexp(1.f, 127));
  CHECK(tracker == 0);  // the tracker restarts though the growth was refused
  scale = FLT_MAX;
  tracker = 4;
  amp::update_scale(scale, tracker, false, 1.5, 0.5, 5);
  CHECK(scale == FLT_MAX);
  CHECK(tracker == 0);
  CHECK(std::isfinite(scale));
}

TEST_CASE("task1: factors apply in double and round once to float; backoff resets the tracker",
          "[08_mixed_precision][task1][points:1]") {
  float scale = 3.f;
  std::int32_t tracker = 1;
  amp::update_scale(scale, tracker, false, 1.1, 0.3, 2);
  CHECK(scale == static_cast<float>(3.0 * 1.1));  // a float product would round differently
  CHECK(tracker == 0);
  tracker = 7;
  amp::update_scale(scale, tracker, true, 1.1, 0.3, 10);
  CHECK(scale == static_cast<float>(static_cast<double>(static_cast<float>(3.0 * 1.1)) * 0.3));
  CHECK(tracker == 0);
  // A clean step below the interval only counts.
  amp::update_scale(scale, tracker, false, 1.1, 0.3, 10);
  CHECK(tracker == 1);
}

TEST_CASE("task1: your rule inside GradScaler: the interval-3 sequence through scale/step/update",
          "[08_mixed_precision][task1][points:1]") {
  mgpu::testing::check_interval_3_through_scaler(1.f, false);
}
