// PyTorch's GradScaler update rule over one sequence of steps, checked on amp::update_scale
// alone and inside GradScaler (lesson 08's task 1, and the library's tests of the reference).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "mgpu/amp/grad_scaler.h"
#include "mgpu/amp/scaling.h"
#include "reference_models.h"

namespace mgpu::testing {

/// growth_interval 3, growth 2, backoff 0.5, from 65536: after clean, clean, inf, clean,
/// clean, clean the scale and the growth tracker must be PyTorch's after each update.
inline void check_interval_3_sequence() {
  float scale = 65536.f;
  std::int32_t tracker = 0;
  const bool found[] = {false, false, true, false, false, false};
  const float want_scale[] = {65536, 65536, 32768, 32768, 32768, 65536};
  const std::int32_t want_tracker[] = {1, 2, 0, 1, 2, 0};
  for (int i = 0; i < 6; ++i) {
    amp::update_scale(scale, tracker, found[i], 2.0, 0.5, 3);
    INFO("after update " << i + 1 << " (" << (found[i] ? "inf" : "clean") << ")");
    CHECK(scale == want_scale[i]);
    CHECK(tracker == want_tracker[i]);
  }
}

/// The same sequence through GradScaler (growth_interval 3): each iteration scales a loss,
/// sets every gradient of a LinearWithSgd to `clean_grad` (inf on the third), steps and
/// updates; the step is taken on clean iterations only and the scale is PyTorch's after each
/// update. With `every_stage`, also the scale each loss was multiplied by and
/// last_step_skipped().
inline void check_interval_3_through_scaler(float clean_grad, bool every_stage) {
  amp::GradScalerOptions o;
  o.growth_interval = 3;
  amp::GradScaler scaler(o);
  LinearWithSgd toy;
  const bool inf_step[] = {false, false, true, false, false, false};
  const double want[] = {65536, 65536, 32768, 32768, 32768, 65536};
  for (int i = 0; i < 6; ++i) {
    const Tensor loss = scaler.scale(Tensor::full({}, 1.0));
    if (every_stage) CHECK(loss.item() == (i < 3 ? 65536.0 : 32768.0));  // the scale this iteration uses
    toy.set_grads(inf_step[i] ? std::numeric_limits<float>::infinity() : clean_grad);
    CHECK(scaler.step(*toy.sgd) == !inf_step[i]);
    if (every_stage) CHECK(scaler.last_step_skipped() == inf_step[i]);
    scaler.update();
    INFO("iteration " << i + 1);
    CHECK(scaler.get_scale() == want[i]);
  }
}

}  // namespace mgpu::testing
