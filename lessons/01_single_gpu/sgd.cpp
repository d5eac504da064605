// Task 2: stochastic gradient descent with momentum and weight decay (PyTorch's rule).
#include <sstream>

#include "lesson01.h"
#include "mgpu/ops.h"

namespace mgpu::lesson01 {

SGD::SGD(std::vector<nn::Parameter*> params, double lr, double momentum, double weight_decay)
    : optim::Optimizer(std::move(params), lr), momentum_(momentum), weight_decay_(weight_decay) {
  MGPU_CHECK(momentum >= 0 && weight_decay >= 0, describe(),
             ": momentum and weight_decay must not be negative");
}

std::string SGD::describe() const {
  std::ostringstream os;
  os << "lesson01::SGD(lr=" << lr() << ", momentum=" << momentum_
     << ", weight_decay=" << weight_decay_ << ")";
  return os.str();
}

void SGD::step() {
  // What you have: the optimizer's lr(), momentum_, params(), weight_decay_; find_state(p,
  // "momentum_buffer") -> the buffer or nullptr; set_state(p, name, t) stores t and returns a
  // reference to it; a Parameter's grad, requires_grad(), value; t.clone(); ops
  // (mgpu/ops.h): add_(t, u), axpy_(y, a, x): y += a·x, scale_(t, a).
  // TODO(task2) BEGIN: one update by PyTorch's SGD rule (chapter §5, task 2) of every
  // parameter that requires a gradient; a frozen one is left alone and gets no state.
  // Invariants: p->grad is exactly as backward left it afterwards; the momentum buffer is
  // optimizer state of its own, a tensor that nothing else aliases, kept under the name
  // "momentum_buffer". Stuck: tools/hint 01 2 (about 15 lines).
  MGPU_FAIL("TODO(task2): lesson01::SGD::step is not written yet "
            "(lessons/01_single_gpu/sgd.cpp); ", params().size(), " parameters to update");
  // TODO(task2) END
}

}  // namespace mgpu::lesson01
