// Task 4: the gradients of the parameters every rank of a tensor-parallel group holds
// whole. Under sequence parallelism each rank's LayerNorms and row-parallel biases saw only
// its own tokens, so each holds a partial gradient; the optimizer needs their sum.
#include "mgpu/copy.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace mgpu::parallel::tp {

void all_reduce_replicated_grads(nn::Module& model, const std::vector<std::string>& names,
                                 dist::ProcessGroup& group) {
  if (names.empty() || group.size() == 1) return;
  // What you have: names (the replicated parameters, e.g.
  // ParallelBlock::replicated_parameter_names()); model.parameter(dotted name) ->
  // nn::Parameter (its .grad, any shape); group: all_reduce(t, dist::ReduceOp) (in place;
  // wait()); copy_(dst, src); t.dtype(), t.device(), t.numel(); t.reshape(shape) and
  // t.view(offset, shape) (views of the same values); Tensor::empty(shape, dtype, device).
  // TODO(task4) BEGIN: chapter §3's replicated gradients: every named gradient becomes its
  // sum over group's ranks (the same on every rank), written back into the tensors it
  // already is. Exactly one collective, however many names (§3: side by side in one
  // buffer). Stuck: tools/hint 13 4 (about 15 lines).
  MGPU_FAIL("TODO(task4): all_reduce_replicated_grads is not written yet ",
              "(lessons/13_tp_sp/replicated_grads.cpp); ", names.size(), " parameter(s) of ",
              model.describe(), " over ", group.size(), " rank(s)");
  // TODO(task4) END
}

}  // namespace mgpu::parallel::tp
