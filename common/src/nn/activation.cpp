// ReLU, GELU and Flatten.
#include "mgpu/nn/activation.h"

#include "mgpu/ops.h"

namespace mgpu::nn {

namespace {

// A pointwise layer's forward: keeps its input x in training, returns f(x).
template <typename Saved>
Tensor keep_and_apply(Saved& saved, bool training, const char* name, const Tensor& x,
                      Tensor (*f)(const Tensor&)) {
  if (training) saved.push(name, x);
  return f(x);
}

// A pointwise layer's backward: takes back the forward's input x, returns df(grad_out, x)
// (nothing when the input needs no gradient).
template <typename Saved>
Tensor pop_and_backprop(Saved& saved, bool input_requires_grad, const char* name,
                        const Tensor& grad_out, Tensor (*df)(const Tensor&, const Tensor&)) {
  Tensor x = saved.pop(name);
  if (!input_requires_grad) return Tensor();
  return df(grad_out, x);
}

}  // namespace

Tensor ReLU::forward(const Tensor& x) { return keep_and_apply(saved_, is_training(), "ReLU", x, relu); }

Tensor ReLU::backward(const Tensor& grad_out) {
  return pop_and_backprop(saved_, input_requires_grad(), "ReLU", grad_out, relu_backward);
}

Tensor GELU::forward(const Tensor& x) { return keep_and_apply(saved_, is_training(), "GELU", x, gelu); }

Tensor GELU::backward(const Tensor& grad_out) {
  return pop_and_backprop(saved_, input_requires_grad(), "GELU", grad_out, gelu_backward);
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
