// Linear: y = x W^T + b, and its backward as two matrix products and a column sum.
// Inside an amp::Autocast region the two matrix products run in f16/bf16 (autocast.h).
#include "mgpu/nn/linear.h"

#include <cmath>
#include <sstream>

#include "layer_util.h"
#include "mgpu/amp/autocast.h"
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

Tensor Linear::forward(const Tensor& x) {
  const Tensor& w = weight().value;
  // The precision policy (amp/autocast.h): f32 here, f16/bf16 inside an Autocast region.
  const DType compute = amp::gemm_dtype(w);
  amp::check_gemm_input(describe(), "input", x, w, compute);
  MGPU_CHECK(x.ndim() == 2 && x.size(1) == in_, describe(), ": input is ", x.str(),
             ", expected [N, ", in_, "] (put a Flatten in front for images)");
  const Tensor xc = amp::cast_operand(x, compute);
  const Tensor wc = amp::cast_weight(w, compute);
  // [N, in] x [in, out], accumulated and returned in the parameters' dtype.
  Tensor y = matmul(xc, wc, /*trans_a=*/false, /*trans_b=*/true, w.dtype());
  if (has_bias_) add_rowwise_(y, bias().value);
  if (is_training()) saved_.push(describe(), Saved{xc, wc});
  return y;
}

Tensor Linear::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  MGPU_CHECK(grad_out.shape() == Shape({s.x.size(0), out_}), describe(), ": grad_out is ",
             grad_out.str(), ", expected [", s.x.size(0), ", ", out_, "]");
  Parameter& w = weight();
  // The GEMMs run in the forward's dtype: the incoming gradient is cast to it too.
  const Tensor g = amp::cast_operand(grad_out, s.x.dtype());
  // dL/dW = grad_out^T x, [out, N] x [N, in], added straight into the gradient (beta = 1).
  if (w.requires_grad()) {
    matmul_out(w.grad, g, s.x, /*trans_a=*/true, /*trans_b=*/false, 1.0, 1.0);
    w.notify_grad_ready();
  }
  // dL/db = sum of grad_out over the batch (each row added the same bias).
  if (has_bias_) detail::accumulate_grad(bias(), sum(grad_out, 0));
  // dL/dx = grad_out W, [N, out] x [out, in]; skipped when x is data.
  if (!input_requires_grad()) return Tensor();
  return matmul(g, s.w, false, false, w.value.dtype());
}

std::shared_ptr<Module> Linear::clone() const {
  auto copy = std::shared_ptr<Linear>(new Linear(*this));
  copy->saved_.clear();
  return copy;
}

}  // namespace mgpu::nn
