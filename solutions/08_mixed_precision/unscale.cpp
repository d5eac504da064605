// Lesson 08, task 2: unscale_ - the stages of an optimizer within one iteration, the
// inverse scale, the inf/NaN check of every gradient, and one skip decision for all ranks.
//
//            unscale_              step             update
//   ready ------------> unscaled -------> stepped --------> ready (next iteration)
//     |                                ^
//     +------ step (unscales first) ---+
#include <algorithm>

#include "mgpu/amp/scaling.h"
#include "mgpu/ops.h"
#include "mgpu/amp/grad_scaler.h"

namespace mgpu::amp {

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_scale_initialized("unscale_");  // throws before the first scale()
  OptimizerState& state = optimizer_state(optimizer);
  // What you have: state.stage (Stage::ready, unscaled, stepped), state.found_inf_per_device
  // (device string -> flag); scale_; group_; unscale_grads_(optimizer, inv_scale,
  // allow_fp16) -> one found_inf flag per device; flag.item() reads a flag on the host;
  // Tensor::full({}, v, DType::f32, device); group_->all_reduce(t, dist::ReduceOp::max).wait();
  // group_->device().
  // TODO(task2) BEGIN: chapter §4's unscale_ and §5's one decision for all ranks: every
  // gradient multiplied by 1/S computed in double and rounded once to float, f16 gradients
  // refused; found_inf_per_device says whether any was inf or NaN, and with a group_ it is
  // one flag, on group_->device() under its str(), the same on every rank; the stage becomes
  // unscaled. A second unscale_, or one after step, throws with PyTorch's message (§4)
  // (about 15 lines).
  MGPU_CHECK(state.stage != Stage::unscaled,
             "GradScaler: unscale_() has already been called on this optimizer since the last "
             "update()");
  MGPU_CHECK(state.stage != Stage::stepped, "GradScaler: unscale_() is being called after step()");
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  state.found_inf_per_device = unscale_grads_(optimizer, inv_scale, /*allow_fp16=*/false);
  if (group_ != nullptr) {
    float local = 0.f;
    for (const auto& entry : state.found_inf_per_device)
      local = std::max(local, static_cast<float>(entry.second.item()));
    Tensor agreed = Tensor::full({}, local, DType::f32, group_->device());
    group_->all_reduce(agreed, dist::ReduceOp::max).wait();
    state.found_inf_per_device = {{group_->device().str(), agreed}};
  }
  state.stage = Stage::unscaled;
  // TODO(task2) END
}

}  // namespace mgpu::amp
