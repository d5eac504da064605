// Linear: its parameters, description and copies. forward and backward (y = x W^T + b,
// and two matrix products and a column sum) are lesson 01's task 1, their 16-bit GEMMs
// inside an amp::Autocast region lesson 08's task 3: the library is built with the
// references, solutions/01_single_gpu/linear.cpp and
// solutions/08_mixed_precision/linear_mixed_precision.cpp.
#include "mgpu/nn/linear.h"

#include <cmath>
#include <sstream>

#include "layer_util.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  MGPU_CHECK(in_ > 0 && out_ > 0, "Linear(", in_, ", ", out_, "): sizes must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  Tensor w = Tensor::empty({out_, in_});
  uniform_init_(w, bound);
  weight_ = register_parameter("weight", w);
  if (has_bias_) {
    Tensor b = Tensor::empty({out_});
    uniform_init_(b, bound);
    bias_ = register_parameter("bias", b);
  }
}

Parameter& Linear::bias() {
  MGPU_CHECK(has_bias_, describe(), ": this layer was built without a bias");
  return parameter_at(bias_);
}

std::string Linear::describe() const {
  std::ostringstream os;
  os << "Linear(in=" << in_ << ", out=" << out_ << ", bias=" << (has_bias_ ? "true" : "false")
     << ")";
  return os.str();
}

}  // namespace mgpu::nn
