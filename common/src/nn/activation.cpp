// ReLU, GELU and Flatten.
#include "mgpu/nn/activation.h"

#include "mgpu/ops.h"

namespace mgpu::nn {

Tensor ReLU::forward(const Tensor& x) {
  if (is_training()) saved_.push("ReLU", x);
  return relu(x);
}

Tensor ReLU::backward(const Tensor& grad_out) {
  Tensor x = saved_.pop("ReLU");
  if (!input_requires_grad()) return Tensor();
  return relu_backward(grad_out, x);
}

Tensor GELU::forward(const Tensor& x) {
  if (is_training()) saved_.push("GELU", x);
  return gelu(x);
}

Tensor GELU::backward(const Tensor& grad_out) {
  Tensor x = saved_.pop("GELU");
  if (!input_requires_grad()) return Tensor();
  return gelu_backward(grad_out, x);
}

Tensor Flatten::forward(const Tensor& x) {
  check_defined("Flatten", x, "input");
  MGPU_CHECK(x.ndim() >= 1, "Flatten: input ", x.str(), " has no batch dimension");
  if (is_training()) saved_.push("Flatten", x.shape());
  std::int64_t features = 1;
  for (int d = 1; d < x.ndim(); ++d) features *= x.size(d);
  return x.reshape({x.size(0), features});
}

Tensor Flatten::backward(const Tensor& grad_out) {
  Shape shape = saved_.pop("Flatten");
  if (!input_requires_grad()) return Tensor();
  return grad_out.reshape(shape);
}

}  // namespace mgpu::nn
