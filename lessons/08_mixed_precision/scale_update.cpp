// Lesson 08, task 1: the loss scale's state machine (PyTorch's _amp_update_scale_).
//
//            clean step                    clean step number growth_interval
//   tracker -----------> tracker + 1  ...  ---------------------------------> scale * growth
//      |                                                                    (if finite), 0
//      | inf/NaN found
//      v
//   scale * backoff, tracker 0
#include <cmath>

#include "mgpu/amp/scaling.h"

namespace mgpu::amp {

void update_scale(float& scale, std::int32_t& growth_tracker, bool found_inf,
                  double growth_factor, double backoff_factor, std::int64_t growth_interval) {
  // What you have: backoff_factor, found_inf, growth_factor, growth_interval (this step's
  // inputs); scale and growth_tracker (read and written); static_cast<double>,
  // static_cast<float>; std::isfinite.
  // TODO(task1) BEGIN: one update() of chapter §4's state machine (the rule amp/scaling.h
  // states), on host values: scale (float) and growth_tracker (int32, the clean steps in a
  // row) are updated in place. PyTorch's arithmetic: a new scale is a product computed in
  // double and rounded once to float; the scale never becomes inf (a growth whose result
  // is not finite is refused); the tracker restarts whenever the scale changes or a growth
  // is refused. Tested: §4's worked sequence, alone and inside GradScaler; a scale near the
  // float maximum; factors that are not powers of two. Stuck: tools/hint 08 1
  // (about 12 lines).
  MGPU_FAIL("TODO(task1): update_scale is not written yet "
            "(lessons/08_mixed_precision/scale_update.cpp); called with scale ", scale,
            ", growth_tracker ", growth_tracker, ", found_inf ", found_inf, ", growth ",
            growth_factor, ", backoff ", backoff_factor, ", interval ", growth_interval);
  // TODO(task1) END
}

}  // namespace mgpu::amp
