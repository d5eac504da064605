// Task 2: the conjugate operators f and g of the Megatron-LM paper. Each is one
// all-reduce in one direction and nothing in the other; together they are all the
// communication a Megatron MLP block needs.
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::tp {

Tensor CopyToTensorParallelRegion::forward(const Tensor& x) {
  // What you have: x, the whole input, on every rank of group().
  // TODO(task2) BEGIN: f's forward (chapter §2): what the layers after f receive; no
  // collective. Stuck: tools/hint 11 2 (1 line).
  return x;
  // TODO(task2) END
}

Tensor CopyToTensorParallelRegion::backward(const Tensor& grad_out) {
  // What you have: grad_out (this rank's term of d(loss)/dx); group(), the ProcessGroup f
  // was given: all_reduce(t, dist::ReduceOp) -> dist::Work (in place; wait() blocks until
  // it is done).
  // TODO(task2) BEGIN: f's backward (chapter §2): the whole d(loss)/dx, the same on every
  // rank of group() (never the world: in a 2-D grid it mixes replicas that read other
  // data); exactly one collective, complete when the function returns. Stuck:
  // tools/hint 11 2 (about 3 lines).
  group().all_reduce(grad_out, dist::ReduceOp::sum).wait();
  return grad_out;
  // TODO(task2) END
}

Tensor ReduceFromTensorParallelRegion::forward(const Tensor& x) {
  // What you have: x (this rank's partial sum of the output); group(), the ProcessGroup g
  // was given: all_reduce(t, dist::ReduceOp) -> dist::Work (in place; wait()).
  // TODO(task2) BEGIN: g's forward (chapter §2): the whole output, the same on every rank
  // of group(); exactly one collective, complete when the function returns. Stuck:
  // tools/hint 11 2 (about 3 lines).
  group().all_reduce(x, dist::ReduceOp::sum).wait();
  return x;
  // TODO(task2) END
}

Tensor ReduceFromTensorParallelRegion::backward(const Tensor& grad_out) {
  // What you have: grad_out, the whole d(loss)/dy, on every rank.
  // TODO(task2) BEGIN: g's backward (chapter §2): the gradient of this rank's term of the
  // sum; no collective. Stuck: tools/hint 11 2 (1 line).
  return grad_out;
  // TODO(task2) END
}

// ---- given -----------------------------------------------------------------------------------

std::string CopyToTensorParallelRegion::describe() const {
  return "f: CopyToTensorParallelRegion(ranks=" + std::to_string(group().size()) +
         "; forward identity, backward all-reduce)";
}

std::string ReduceFromTensorParallelRegion::describe() const {
  return "g: ReduceFromTensorParallelRegion(ranks=" + std::to_string(group().size()) +
         "; forward all-reduce, backward identity)";
}

}  // namespace mgpu::parallel::tp
