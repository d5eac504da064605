// Dropout: multiply by a seeded mask in training mode, the identity in eval mode.
#include "mgpu/nn/dropout.h"

#include <sstream>

#include "mgpu/nn/functional.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/rng.h"

namespace mgpu::nn {

Dropout::Dropout(double p, std::uint64_t seed) : p_(p), seed_(seed == 0 ? next_seed() : seed) {
  MGPU_CHECK(p >= 0.0 && p <= 1.0, "Dropout(", p, "): p must be a probability in [0, 1]");
}

std::string Dropout::describe() const {
  std::ostringstream os;
  os << "Dropout(p=" << p_ << ")";
  return os.str();
}

Tensor Dropout::forward(const Tensor& x) {
  check_defined("Dropout", x, "input");
  if (!is_training()) return x;
  Tensor mask = dropout_mask(x.shape(), x.dtype(), x.device(), p_, mix_seed(seed_, calls_++));
  saved_.push(describe(), mask);
  return mul(x, mask);
}

Tensor Dropout::backward(const Tensor& grad_out) {
  Tensor mask = saved_.pop(describe());
  if (!input_requires_grad()) return Tensor();
  return mul(grad_out, mask);
}

}  // namespace mgpu::nn
