// Task 1: the fully connected layer, forward and backward.
//
// Shapes to keep in mind (N = batch size):
//   x [N, in]    W [out, in]    b [out]    y = x W^T + b  [N, out]
// Backward gets g = dL/dy [N, out] and needs three products of the same matrices:
//   dL/dW = g^T x  [out, in]      dL/db = sum of g's rows  [out]      dL/dx = g W  [N, in]
#include <cmath>
#include <sstream>

#include "lesson01.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"

namespace mgpu::lesson01 {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  MGPU_CHECK(in_ > 0 && out_ > 0, "Linear(", in_, ", ", out_, "): sizes must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  Tensor w = Tensor::empty({out_, in_});
  nn::uniform_init_(w, bound);
  weight_ = register_parameter("weight", w);
  if (has_bias_) {
    Tensor b = Tensor::empty({out_});
    nn::uniform_init_(b, bound);
    bias_ = register_parameter("bias", b);
  }
}

nn::Parameter& Linear::bias() {
  MGPU_CHECK(has_bias_, describe(), ": this layer was built without a bias");
  return parameter_at(bias_);
}

std::string Linear::describe() const {
  std::ostringstream os;
  os << "lesson01::Linear(in=" << in_ << ", out=" << out_
     << ", bias=" << (has_bias_ ? "true" : "false") << ")";
  return os.str();
}

std::shared_ptr<nn::Module> Linear::clone() const {
  auto copy = std::shared_ptr<Linear>(new Linear(*this));
  copy->saved_inputs_.clear();
  return copy;
}

Tensor Linear::forward(const Tensor& x) {
  check_defined("lesson01::Linear::forward", x, "x");
  MGPU_CHECK(x.ndim() == 2 && x.size(1) == in_, describe(), ": input is ", x.str(),
             ", expected [N, ", in_, "] (put a Flatten in front for images)");
  // What you have: the layer's bias().value, has_bias_, is_training(), weight().value;
  // saved_inputs_.push(key, t) keeps t for the backward under key describe() (pop takes it
  // back); ops (mgpu/ops.h): add_rowwise_(y, v) adds v to every row of y, matmul(a, b,
  // trans_a, trans_b) (either operand transposed).
  // TODO(task1) BEGIN: the layer's output for the N rows of x [N, in] (chapter §5, task 1),
  // [N, out], the bias added only when the layer has one. In training mode x is kept for the
  // backward; in evaluation mode nothing is kept. Stuck: tools/hint 01 1 (about 5 lines).
  MGPU_FAIL("TODO(task1): lesson01::Linear::forward is not written yet "
            "(lessons/01_single_gpu/linear.cpp); called with x ", x.str());
  // TODO(task1) END
}

Tensor Linear::backward(const Tensor& grad_out) {
  check_defined("lesson01::Linear::backward", grad_out, "grad_out");
  // What you have: the layer's bias(), has_bias_, weight(); a Parameter's grad,
  // notify_grad_ready(), requires_grad(), value; saved_inputs_.pop(describe()) -> the x of
  // the matching forward; ops (mgpu/ops.h): add_(t, u), matmul(a, b, trans_a, trans_b),
  // matmul_out(out, a, b, trans_a, trans_b, alpha, beta): out = alpha·(a b) + beta·out,
  // sum(t, dim).
  // TODO(task1) BEGIN: the three gradients of chapter §5 from grad_out [N, out] and the saved
  // x. Invariants: a parameter's gradient is ADDED to its grad (earlier backwards may have
  // put theirs there); a parameter that does not require a gradient is left untouched; each
  // parameter announces its gradient (its grad-ready hooks, chapter §1) once, the moment it
  // is final. Returns dL/dx [N, in], whatever is frozen. Stuck: tools/hint 01 1 (about 12
  // lines).
  MGPU_FAIL("TODO(task1): lesson01::Linear::backward is not written yet "
            "(lessons/01_single_gpu/linear.cpp); called with grad_out ", grad_out.str());
  // TODO(task1) END
}

}  // namespace mgpu::lesson01
