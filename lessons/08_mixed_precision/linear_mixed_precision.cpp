// Lesson 08, task 3: nn::Linear's forward and backward under the precision policy, inside an
// autocast region: 16-bit GEMMs on f32 master weights. Lesson 01's Linear::forward and
// Linear::backward (mgpu/nn/linear.h) hand over to these two when the region's GEMM dtype
// is not the weight's; outside a region they stay plain f32.
//
//   forward    x (f32) --cast--> x16 --+
//              W (f32) --cast--> W16 --+-- GEMM, f32 sums --> y (f32) + b
//                        (once per region)
//   backward   g (f32) --cast--> g16 --GEMM with x16--> dW added to W.grad (f32)
//                                    --GEMM with W16--> dx (f32)
//              db = sum of g's rows (f32)
#include "mgpu/nn/autocast.h"
#include "mgpu/nn/linear.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

Tensor Linear::forward_autocast(const Tensor& x, DType compute) {
  const Tensor& w = weight().value;
  // What you have: x (checked: [N, in], any floating dtype), w (the f32 weight [out, in]),
  // compute (the GEMM's 16-bit dtype); bias().value, has_bias(), is_training();
  // saved_.push(describe(), Saved{x, w}) keeps two tensors for the backward. Functions:
  // add_rowwise_(y, v) (v added to every row of y); amp::cast_operand(t, dtype);
  // amp::cast_weight(w, dtype) (one cast per region, cached); cast(t, dtype); matmul(a, b,
  // trans_a, trans_b, out_dtype).
  // TODO(task3) BEGIN: lesson 01's forward, y = x W^T + b, under chapter §3's policy (its
  // table's first two rows): x [N, in] -> y f32 [N, out]. The GEMM's operands are in
  // `compute`, the weight cast once per region, not once per call; the GEMM sums in f32 and
  // the bias is added in f32. In training mode the layer keeps, for its backward, the
  // operands its GEMM used (16-bit). Stuck: tools/hint 08 3 (about 6 lines).
  MGPU_FAIL("TODO(task3): Linear::forward_autocast is not written yet "
            "(lessons/08_mixed_precision/linear_mixed_precision.cpp); input ", x.str(),
            ", weight ", w.str(), ", GEMM in ", dtype_name(compute));
  // TODO(task3) END
}

Tensor Linear::backward_autocast(const Tensor& grad_out, const Saved& s) {
  Parameter& w = weight();
  // What you have: grad_out (f32 [N, out], shape checked); s.x, s.w (the forward's GEMM
  // operands, 16-bit); w and bias() (Parameters: value, grad, requires_grad(),
  // notify_grad_ready()); has_bias(); input_requires_grad(). Functions: add_(t, u);
  // amp::cast_operand(t, dtype); cast(t, dtype); matmul(a, b, trans_a, trans_b, out_dtype);
  // matmul_out(out, a, b, trans_a, trans_b, alpha, beta): out = alpha (a b) + beta out;
  // sum(t, dim).
  // TODO(task3) BEGIN: lesson 01's three gradients under chapter §3's policy: the GEMMs take
  // grad_out in the forward's dtype and sum in f32; a weight gradient is ADDED to the f32
  // .grad and never rounded to 16 bits; the bias gradient comes from the f32 grad_out, not
  // from a 16-bit copy; a parameter that needs no gradient is left alone; each parameter
  // announces its gradient the moment it is final, the bias's before the weight's (the
  // order lesson 05's DDP sees, PyTorch's too). Returns dx f32 [N, in], or an empty Tensor
  // when the input needs no gradient (!input_requires_grad(): x is data). Stuck:
  // tools/hint 08 3 (about 12 lines).
  MGPU_FAIL("TODO(task3): Linear::backward_autocast is not written yet "
            "(lessons/08_mixed_precision/linear_mixed_precision.cpp); grad_out ", grad_out.str(),
            ", weight ", w.value.str(), ", operands ", s.x.str());
  // TODO(task3) END
}

}  // namespace mgpu::nn
