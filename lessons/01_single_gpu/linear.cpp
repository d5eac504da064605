// Task 1: the fully connected layer's forward and backward: the library's nn::Linear
// (mgpu/nn/linear.h), which every model of the course is built from.
//
// Shapes to keep in mind (N = batch size):
//   x [N, in]    W [out, in]    b [out]    y = x W^T + b  [N, out]
// Backward gets g = dL/dy [N, out] and needs three products of the same matrices:
//   dL/dW = g^T x  [out, in]      dL/db = sum of g's rows  [out]      dL/dx = g W  [N, in]
#include "mgpu/nn/autocast.h"
#include "mgpu/nn/linear.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

Tensor Linear::forward(const Tensor& x) {
  check_defined("Linear::forward", x, "x");
  const Tensor& w = weight().value;
  // The GEMM's dtype: the weight's own, except inside an amp::Autocast region, where the
  // 16-bit path is forward_autocast (lesson 08's task 3).
  const DType compute = amp::gemm_dtype(w);
  amp::check_gemm_input(describe(), "input", x, w, compute);
  MGPU_CHECK(x.ndim() == 2 && x.size(1) == in_features(), describe(), ": input is ", x.str(),
             ", expected [N, ", in_features(), "] (put a Flatten in front for images)");
  if (compute != w.dtype()) return forward_autocast(x, compute);
  // What you have: x, w (the weight [out, in]); bias().value, has_bias(), is_training();
  // saved_.push(describe(), Saved{x, w}) keeps the GEMM's two operands for the backward
  // (saved_.pop(describe()) takes them back); ops (mgpu/ops.h): add_rowwise_(y, v) adds v to
  // every row of y, matmul(a, b, trans_a, trans_b) (either operand transposed).
  // TODO(task1) BEGIN: the layer's output for the N rows of x [N, in] (chapter §5, task 1),
  // [N, out], the bias added only when the layer has one. In training mode the operands are
  // kept for the backward; in evaluation mode nothing is kept.
  // Stuck: tools/hint 01 1 (about 5 lines).
  MGPU_FAIL("TODO(task1): Linear::forward is not written yet "
            "(lessons/01_single_gpu/linear.cpp); called with x ", x.str());
  // TODO(task1) END
}

Tensor Linear::backward(const Tensor& grad_out) {
  check_defined("Linear::backward", grad_out, "grad_out");
  Saved s = saved_.pop(describe());
  MGPU_CHECK(grad_out.shape() == Shape({s.x.size(0), out_features()}), describe(),
             ": grad_out is ", grad_out.str(), ", expected [", s.x.size(0), ", ",
             out_features(), "]");
  // A forward inside an autocast region kept 16-bit operands: lesson 08's backward.
  if (s.w.dtype() != weight().value.dtype()) return backward_autocast(grad_out, s);
  Parameter& w = weight();
  // What you have: grad_out [N, out]; s.x, s.w (the forward's x and W); w and bias()
  // (Parameters: value, grad, requires_grad(), notify_grad_ready()); has_bias();
  // input_requires_grad(); ops (mgpu/ops.h): add_(t, u), matmul(a, b, trans_a, trans_b),
  // matmul_out(out, a, b, trans_a, trans_b, alpha, beta): out = alpha·(a b) + beta·out,
  // sum(t, dim).
  // TODO(task1) BEGIN: the three gradients of chapter §5 from grad_out [N, out] and the saved
  // operands. Invariants: a parameter's gradient is ADDED to its grad (earlier backwards may
  // have put theirs there); a parameter that does not require a gradient is left untouched;
  // each parameter announces its gradient (its grad-ready hooks, chapter §1) once, the
  // moment it is final, the bias's before the weight's (the order PyTorch's DDP sees).
  // Returns dL/dx [N, in] whatever is frozen, or an empty Tensor when the input needs no
  // gradient (!input_requires_grad(): x is data). Stuck: tools/hint 01 1 (about 12 lines).
  MGPU_FAIL("TODO(task1): Linear::backward is not written yet "
            "(lessons/01_single_gpu/linear.cpp); called with grad_out ", grad_out.str(),
            ", weight ", w.value.str());
  // TODO(task1) END
}

}  // namespace mgpu::nn
