// Task 2: the conjugate operators f and g of the Megatron-LM paper. Each is one
// all-reduce in one direction and nothing in the other; together they are all the
// communication a Megatron MLP block needs.
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::tp {

Tensor CopyToTensorParallelRegion::forward(const Tensor& x) {
  // TODO(task2) BEGIN: f's forward: every rank already holds the whole x, so nothing
  // travels (1 line).
  MGPU_FAIL("TODO(task2): f's forward is not written yet (lessons/11_tensor_parallel/conjugate.cpp); "
            "input ", x.str());
  // TODO(task2) END
}

Tensor CopyToTensorParallelRegion::backward(const Tensor& grad_out) {
  // TODO(task2) BEGIN: f's backward: each rank's layer after f saw all of x, so its
  // grad_out is one term of d(loss)/dx. Sum the terms over group() with one all_reduce,
  // wait for it, and return the sum (about 3 lines).
  MGPU_FAIL("TODO(task2): f's backward is not written yet (lessons/11_tensor_parallel/conjugate.cpp); "
            "gradient ", grad_out.str(), " over ", group().size(), " rank(s)");
  // TODO(task2) END
}

Tensor ReduceFromTensorParallelRegion::forward(const Tensor& x) {
  // TODO(task2) BEGIN: g's forward: x is this rank's partial sum of the output. Sum the
  // partial sums over group() with one all_reduce, wait, and return the sum (about 3 lines).
  MGPU_FAIL("TODO(task2): g's forward is not written yet (lessons/11_tensor_parallel/conjugate.cpp); "
            "partial sum ", x.str(), " over ", group().size(), " rank(s)");
  // TODO(task2) END
}

Tensor ReduceFromTensorParallelRegion::backward(const Tensor& grad_out) {
  // TODO(task2) BEGIN: g's backward: y = x_0 + ... + x_{P-1}, so dy/dx_r = 1 and every
  // rank already holds the whole gradient: nothing travels (1 line).
  MGPU_FAIL("TODO(task2): g's backward is not written yet (lessons/11_tensor_parallel/conjugate.cpp); "
            "gradient ", grad_out.str());
  // TODO(task2) END
}

// ---- given -----------------------------------------------------------------------------------

std::shared_ptr<nn::Module> CopyToTensorParallelRegion::clone() const {
  return std::shared_ptr<CopyToTensorParallelRegion>(new CopyToTensorParallelRegion(*this));
}

std::string CopyToTensorParallelRegion::describe() const {
  return "f: CopyToTensorParallelRegion(ranks=" + std::to_string(group().size()) +
         "; forward identity, backward all-reduce)";
}

std::shared_ptr<nn::Module> ReduceFromTensorParallelRegion::clone() const {
  return std::shared_ptr<ReduceFromTensorParallelRegion>(new ReduceFromTensorParallelRegion(*this));
}

std::string ReduceFromTensorParallelRegion::describe() const {
  return "g: ReduceFromTensorParallelRegion(ranks=" + std::to_string(group().size()) +
         "; forward all-reduce, backward identity)";
}

}  // namespace mgpu::parallel::tp
