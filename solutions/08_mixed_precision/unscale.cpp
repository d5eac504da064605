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
  // What you have: members: group_ (the ProcessGroup to agree over, or null), scale_ (S, a
  // float); state.found_inf_per_device (device string -> f32 {} flag), state.stage
  // (Stage::ready, unscaled, stepped). Functions: group_->all_reduce(t, dist::ReduceOp) ->
  // dist::Work (in place; wait()), group_->device(); inverse_scale(scale) (scaling.h);
  // t.item() (a {} tensor's value on the host); Tensor::full(shape, v, dtype, device);
  // unscale_grads_(optimizer, inv_scale, allow_fp16) -> one found_inf flag per device.
  // TODO(task2) BEGIN: chapter §4's unscale_ and §5's one decision for all ranks. Afterwards
  // every gradient of the optimizer has been multiplied by 1/S (computed in double, rounded
  // once to float), f16 gradients refused; state.found_inf_per_device says whether any
  // gradient was inf or NaN: per device without a group_; with one, a single f32 {} flag
  // under group_->device().str(), the same on every rank and set if any rank found one,
  // agreed with exactly one collective whether or not any did; the stage is unscaled.
  // Misuse throws PyTorch's words (§4): a second unscale_ before update() "unscale_() has
  // already been called on this optimizer since the last update()", one after step()
  // "unscale_() is being called after step()". Stuck: tools/hint 08 2 (about 15 lines).
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
