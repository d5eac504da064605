// Private: the CUDA twin of adamw_update_'s CPU loop (operands already checked).
#pragma once

#include "mgpu/tensor.h"

namespace mgpu::optim::detail {
void adamw_update_cuda(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double beta1,
                       double beta2, double eps, double weight_decay, double bias_correction1,
                       double bias_correction2);
}  // namespace mgpu::optim::detail
