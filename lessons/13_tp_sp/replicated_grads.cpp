// Task 4: the gradients of the parameters every rank of a tensor-parallel group holds
// whole. Under sequence parallelism each rank's LayerNorms and row-parallel biases saw only
// its own tokens, so each holds a partial gradient; the optimizer needs their sum.
#include "mgpu/copy.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace mgpu::parallel::tp {

void all_reduce_replicated_grads(nn::Module& model, const std::vector<std::string>& names,
                                 dist::ProcessGroup& group) {
  if (names.empty() || group.size() == 1) return;
  // What you have: model.parameter(dotted name) -> nn::Parameter (its .grad, any shape);
  // names (the replicated parameters, e.g. ParallelBlock::replicated_parameter_names());
  // group: all_reduce(t, dist::ReduceOp) (in place; wait()); Tensor::empty, t.view(offset,
  // shape), t.reshape(shape) (a view of the same values), copy_(dst, src).
  // TODO(task4) BEGIN: chapter §4: every named gradient becomes its sum over group's ranks
  // (the same on every rank), written back into the tensors it already is. Exactly one
  // collective, however many names: the gradients travel side by side in one flat buffer
  // (about 15 lines).
  MGPU_FAIL("TODO(task4): all_reduce_replicated_grads is not written yet ",
              "(lessons/13_tp_sp/replicated_grads.cpp); ", names.size(), " parameter(s) of ",
              model.describe(), " over ", group.size(), " rank(s)");
  // TODO(task4) END
}

}  // namespace mgpu::parallel::tp
