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
  MGPU_FAIL("TODO(task2): GradScaler::unscale_ is not written yet "
            "(lessons/08_mixed_precision/unscale.cpp); optimizer ", optimizer.describe(),
            ", scale ", scale_, ", stage ", static_cast<int>(state.stage), ", ",
            group_ ? "with" : "without", " a process group");
  // TODO(task2) END
}

}  // namespace mgpu::amp
