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
  for (nn::Parameter* p : params()) {
    if (!p->requires_grad()) continue;
    Tensor d = p->grad;
    if (options_.weight_decay != 0) {
      d = p->grad.clone();  // a new tensor: the gradient itself must stay as backward left it
      axpy_(d, options_.weight_decay, p->value);
    }
    if (options_.momentum != 0) {
      Tensor* buf = find_state(*p, "momentum_buffer");
      if (buf == nullptr) {
        // A copy, not d itself: d may be p->grad, which zero_grad() will clear.
        buf = &set_state(*p, "momentum_buffer", d.clone());
      } else {
        scale_(*buf, options_.momentum);
        add_(*buf, d);
      }
      d = *buf;
    }
    axpy_(p->value, -lr(), d);
  }
  // TODO(task2) END
}

}  // namespace mgpu::optim
