// MaxPool2d: keeps the argmax of every window for backward.
#include "mgpu/nn/maxpool2d.h"

#include <sstream>

#include "mgpu/nn/functional.h"

namespace mgpu::nn {

MaxPool2d::MaxPool2d(std::int64_t kernel_size, std::int64_t stride)
    : kernel_(kernel_size), stride_(stride == 0 ? kernel_size : stride) {
  MGPU_CHECK(kernel_ >= 1 && stride_ >= 1, "MaxPool2d(", kernel_size, ", ", stride,
             "): kernel and stride must be positive");
}

std::string MaxPool2d::describe() const {
  std::ostringstream os;
  os << "MaxPool2d(kernel=" << kernel_ << ", stride=" << stride_ << ")";
  return os.str();
}

Tensor MaxPool2d::forward(const Tensor& x) {
  Tensor argmax;
  Tensor y = max_pool2d(x, kernel_, stride_, &argmax);
  if (is_training()) saved_.push(describe(), Saved{argmax, x.shape()});
  return y;
}

Tensor MaxPool2d::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  if (!input_requires_grad()) return Tensor();
  return max_pool2d_backward(grad_out, s.argmax, s.input_shape, kernel_, stride_);
}

}  // namespace mgpu::nn
