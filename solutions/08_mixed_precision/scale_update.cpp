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
  if (found_inf) {
    scale = static_cast<float>(static_cast<double>(scale) * backoff_factor);
    growth_tracker = 0;
    return;
  }
  const std::int64_t successful = static_cast<std::int64_t>(growth_tracker) + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
    if (std::isfinite(grown)) scale = grown;
    growth_tracker = 0;
  } else {
    growth_tracker = static_cast<std::int32_t>(successful);
  }
  // TODO(task1) END
}

}  // namespace mgpu::amp
