// Private helpers shared by the layers: operand checks and gradient accumulation.
#pragma once

#include <string>

#include "mgpu/nn/parameter.h"
#include "mgpu/ops.h"
#include "mgpu/tensor.h"

namespace mgpu::nn::detail {

/// Throws unless x lives where the layer's parameters live and has their dtype.
inline void check_like_param(const std::string& layer, const char* what, const Tensor& x,
                             const Tensor& param) {
  check_defined(layer.c_str(), x, what);
  MGPU_CHECK(x.device() == param.device(), layer, ": ", what, " is ", x.str(),
             " but the layer's parameters are on ", param.device().str(),
             " (move the model with model.to(device) or the batch with .to(device))");
  MGPU_CHECK(x.dtype() == param.dtype(), layer, ": ", what, " is ", x.str(),
             " but the layer's parameters are ", dtype_name(param.dtype()),
             " (convert one with .to(dtype))");
}

/// p.grad += contribution (converted to the grad's dtype when a reduction widened it),
/// then fires p's grad-ready hooks: its gradient for this backward is final.
inline void accumulate_grad(Parameter& p, const Tensor& contribution) {
  if (!p.requires_grad()) return;
  if (contribution.dtype() != p.grad.dtype()) {
    add_(p.grad, cast(contribution, p.grad.dtype()));
  } else {
    add_(p.grad, contribution);
  }
  p.notify_grad_ready();
}

}  // namespace mgpu::nn::detail
