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
  // TODO(task2) BEGIN: for every parameter p in params() that requires_grad():
  //   d = p->grad, or a clone() of it plus weight_decay * p->value when weight_decay != 0
  //       (axpy_; never change p->grad itself);
  //   with momentum: the buffer is find_state(*p, "momentum_buffer"); if it is nullptr this
  //       is the first step: create it as a clone of d with set_state(...); otherwise
  //       buf = momentum * buf + d (scale_, add_); then d = buf;
  //   p->value -= lr() * d (axpy_).  (about 15 lines)
  for (nn::Parameter* p : params()) {
    if (!p->requires_grad()) continue;
    Tensor d = p->grad;
    if (weight_decay_ != 0) {
      d = p->grad.clone();  // a new tensor: the gradient itself must stay as backward left it
      axpy_(d, weight_decay_, p->value);
    }
    if (momentum_ != 0) {
      Tensor* buf = find_state(*p, "momentum_buffer");
      if (buf == nullptr) {
        // A copy, not d itself: d may be p->grad, which zero_grad() will clear.
        buf = &set_state(*p, "momentum_buffer", d.clone());
      } else {
        scale_(*buf, momentum_);
        add_(*buf, d);
      }
      d = *buf;
    }
    axpy_(p->value, -lr(), d);
  }
  // TODO(task2) END
}

}  // namespace mgpu::lesson01
