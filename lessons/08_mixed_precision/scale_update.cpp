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
  // TODO(task1) BEGIN: the rule in mgpu/amp/scaling.h. Multiply in double
  // (static_cast<double>(scale) * factor) and round once with static_cast<float>; keep a
  // grown scale only if std::isfinite says so; reset the tracker whenever the scale
  // changes or growth was refused. (about 12 lines)
  MGPU_FAIL("TODO(task1): update_scale is not written yet "
            "(lessons/08_mixed_precision/scale_update.cpp); called with scale ", scale,
            ", growth_tracker ", growth_tracker, ", found_inf ", found_inf, ", growth ",
            growth_factor, ", backoff ", backoff_factor, ", interval ", growth_interval);
  // TODO(task1) END
}

}  // namespace mgpu::amp
