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
  // What you have: params(), lr(), momentum_, weight_decay_; a Parameter's value, grad and
  // requires_grad(); clone(); axpy_(y, a, x): y += a·x; scale_(t, a); add_(t, u);
  // find_state(p, "momentum_buffer") -> the buffer or nullptr; set_state(p, name, t) stores t
  // and returns a reference to it.
  // TODO(task2) BEGIN: one update by PyTorch's SGD rule (chapter §5, task 2) of every
  // parameter that requires a gradient. Invariants: p->grad is exactly as backward left it
  // afterwards; the momentum buffer is optimizer state of its own, a tensor that nothing else
  // aliases, kept under the name "momentum_buffer". (about 15 lines)
  MGPU_FAIL("TODO(task2): lesson01::SGD::step is not written yet "
            "(lessons/01_single_gpu/sgd.cpp); ", params().size(), " parameters to update");
  // TODO(task2) END
}

}  // namespace mgpu::lesson01
