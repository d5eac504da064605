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
  // What you have: state.stage / state.found_inf_per_device; scale_; group_;
  // unscale_grads_(optimizer, inv_scale, allow_fp16) -> one found_inf flag per device;
  // flag.item() reads a flag on the host; Tensor::full({}, v, DType::f32, device);
  // group_->all_reduce(t, dist::ReduceOp::max).wait(); group_->device().
  // TODO(task2) BEGIN: (1) throw (MGPU_CHECK) when state.stage is Stage::unscaled or
  // Stage::stepped, with PyTorch's messages (mgpu/amp/grad_scaler.h); (2) inv_scale = 1 / scale_
  // in double, rounded to float; (3) state.found_inf_per_device <- unscale_grads_ with
  // f16 gradients refused; (4) with a group_, replace the flags by one: this rank's
  // largest flag, all-reduced with MAX, on group_->device(), keyed by that device's str();
  // (5) state.stage <- Stage::unscaled. (about 15 lines)
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
