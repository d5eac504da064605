// SGD with momentum and weight decay, written with the library's ops.
#include "mgpu/optim/sgd.h"

#include <sstream>

#include "mgpu/ops.h"

namespace mgpu::optim {

SGD::SGD(std::vector<nn::Parameter*> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  MGPU_CHECK(options.momentum >= 0 && options.weight_decay >= 0, describe(),
             ": momentum and weight_decay must not be negative");
}

std::string SGD::describe() const {
  std::ostringstream os;
  os << "SGD(lr=" << lr() << ", momentum=" << options_.momentum
     << ", weight_decay=" << options_.weight_decay << ")";
  return os.str();
}

std::vector<std::string> SGD::state_keys() const { return {"momentum_buffer"}; }

void SGD::step() {
  for (nn::Parameter* p : params()) {
    if (!p->requires_grad()) continue;
    // Step 1) the direction: the gradient, plus weight_decay * p (L2 regularisation).
    Tensor d = p->grad;
    if (options_.weight_decay != 0) {
      d = p->grad.clone();
      axpy_(d, options_.weight_decay, p->value);
    }
    // Step 2) momentum: a running sum of directions, decayed by `momentum` each step.
    if (options_.momentum != 0) {
      Tensor* buf = find_state(*p, "momentum_buffer");
      if (buf == nullptr) {
        buf = &set_state(*p, "momentum_buffer", d.clone());  // first step: buf = d
      } else {
        scale_(*buf, options_.momentum);
        add_(*buf, d);
      }
      d = *buf;
    }
    // Step 3) move against it.
    axpy_(p->value, -lr(), d);
  }
}

}  // namespace mgpu::optim
