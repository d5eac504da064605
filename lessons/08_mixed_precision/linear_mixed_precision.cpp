// Lesson 08, task 3: nn::Linear's forward and backward under the precision policy:
// 16-bit GEMMs on f32 master weights.
//
//   forward    x (f32) --cast--> x16 --+
//              W (f32) --cast--> W16 --+-- GEMM, f32 sums --> y (f32) + b
//                        (once per region)
//   backward   g (f32) --cast--> g16 --GEMM with x16--> dW added to W.grad (f32)
//                                    --GEMM with W16--> dx (f32)
//              db = sum of g's rows (f32)
#include "mgpu/amp/autocast.h"
#include "mgpu/nn/linear.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

Tensor Linear::forward(const Tensor& x) {
  const Tensor& w = weight().value;
  const DType compute = amp::gemm_dtype(w);
  amp::check_gemm_input(describe(), "input", x, w, compute);
  MGPU_CHECK(x.ndim() == 2 && x.size(1) == in_features(), describe(), ": input is ", x.str(),
             ", expected [N, ", in_features(), "] (put a Flatten in front for images)");
  // TODO(task3) BEGIN: the operands in `compute` (amp::cast_operand for x, amp::cast_weight
  // for W), y = x W^T with matmul(..., /*trans_b=*/true, w.dtype()), the bias on every row
  // (add_rowwise_) if has_bias(); in training mode saved_.push(describe(), {x16, W16}).
  // (about 6 lines)
  MGPU_FAIL("TODO(task3): Linear::forward is not written yet "
            "(lessons/08_mixed_precision/linear_mixed_precision.cpp); input ", x.str(), ", GEMM in ",
            dtype_name(compute));
  // TODO(task3) END
}

Tensor Linear::backward(const Tensor& grad_out) {
  check_defined("Linear::backward", grad_out, "grad_out");
  Saved s = saved_.pop(describe());
  MGPU_CHECK(grad_out.shape() == Shape({s.x.size(0), out_features()}), describe(),
             ": grad_out is ", grad_out.str(), ", expected [", s.x.size(0), ", ",
             out_features(), "]");
  Parameter& w = weight();
  // TODO(task3) BEGIN: g = grad_out in the forward's dtype (s.x.dtype()). If the weight
  // requires_grad(): matmul_out(w.grad, g, s.x, true, false, 1.0, 1.0) (16-bit operands,
  // f32 sums added to the f32 grad), then w.notify_grad_ready(). If has_bias() and the
  // bias requires_grad(): add_(bias().grad, sum(grad_out, 0)), then its
  // notify_grad_ready(). Return g W16 with an f32 result, or an empty Tensor when the
  // input needs no gradient (!input_requires_grad(): x is data). (about 12 lines)
  MGPU_FAIL("TODO(task3): Linear::backward is not written yet "
            "(lessons/08_mixed_precision/linear_mixed_precision.cpp); grad_out ", grad_out.str(),
            ", weight ", w.value.str());
  // TODO(task3) END
}

}  // namespace mgpu::nn
