// Task 2: stochastic gradient descent with momentum and weight decay (PyTorch's rule): the
// library's optim::SGD::step (mgpu/optim/sgd.h), which every lesson's training loop calls.
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"

namespace mgpu::optim {

void SGD::step() {
  // What you have: the optimizer's lr(), options_.momentum, options_.weight_decay, params();
  // find_state(p, "momentum_buffer") -> the buffer or nullptr; set_state(p, name, t) stores
  // t and returns a reference to it; a Parameter's grad, requires_grad(), value; t.clone();
  // ops (mgpu/ops.h): add_(t, u), axpy_(y, a, x): y += a·x, scale_(t, a).
  // TODO(task2) BEGIN: one update by PyTorch's SGD rule (chapter §5, task 2) of every
  // parameter that requires a gradient; a frozen one is left alone and gets no state.
  // Invariants: p->grad is exactly as backward left it afterwards; the momentum buffer is
  // optimizer state of its own, a tensor that nothing else aliases, kept under the name
  // "momentum_buffer". Stuck: tools/hint 01 2 (about 15 lines).
  MGPU_FAIL("TODO(task2): SGD::step is not written yet "
            "(lessons/01_single_gpu/sgd.cpp); ", params().size(), " parameters to update");
  // TODO(task2) END
}

}  // namespace mgpu::optim
