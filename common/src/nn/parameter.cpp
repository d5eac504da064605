// Parameter: value, gradient, grad-ready hooks.
#include "mgpu/nn/parameter.h"

#include <algorithm>

#include "mgpu/ops.h"

namespace mgpu::nn {

Parameter::Parameter(std::string name, Tensor v, bool requires_grad)
    : value(std::move(v)), name_(std::move(name)) {
  check_defined("Parameter", value, "value");
  set_requires_grad(requires_grad);
}

void Parameter::set_requires_grad(bool on) {
  requires_grad_ = on;
  if (!on) {
    grad = Tensor();
  } else if (!grad.defined()) {
    grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
  }
}

std::size_t Parameter::add_grad_ready_hook(GradReadyHook hook) {
  MGPU_CHECK(static_cast<bool>(hook), "Parameter::add_grad_ready_hook(", name_,
             "): the hook is empty");
  hooks_.emplace_back(next_handle_, std::move(hook));
  return next_handle_++;
}

void Parameter::remove_grad_ready_hook(std::size_t handle) {
  auto it = std::find_if(hooks_.begin(), hooks_.end(),
                         [&](const auto& h) { return h.first == handle; });
  MGPU_CHECK(it != hooks_.end(), "Parameter::remove_grad_ready_hook(", name_,
             "): no hook with handle ", handle);
  hooks_.erase(it);
}

void Parameter::notify_grad_ready() {
  if (!requires_grad_) return;
  for (auto& h : hooks_) h.second(*this);
}

void Parameter::zero_grad() {
  if (grad.defined()) fill_(grad, 0.0);
}

}  // namespace mgpu::nn
