// Task 3: the gradients of every replica summed onto the module on device 0
// (PyTorch: the backward of Broadcast is ReduceAddCoalesced, a sum onto device 0).
#include "data_parallel.h"

#include "mgpu/ops.h"

namespace mgpu::lesson02 {

void reduce_add_gradients(nn::Module& target, const std::vector<std::shared_ptr<nn::Module>>& replicas,
                          Traffic* traffic) {
  const std::vector<nn::Parameter*> to = target.parameters();
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    MGPU_CHECK(replicas[r] != nullptr, "reduce_add_gradients: replica ", r, " is null");
    if (replicas[r].get() == &target) continue;  // its gradients are already in place
    const std::vector<nn::Parameter*> from = replicas[r]->parameters();
    MGPU_CHECK(from.size() == to.size(), "reduce_add_gradients: replica ", r, " has ",
               from.size(), " parameters, the target ", to.size(),
               "; replicas must be copies of the target (replicate())");
    // What you have: add_(t, u); counted_to(t, device, Phase::reduce, traffic); from/to (the
    // replica's and the target's parameters, matched by position); grad.defined().
    // TODO(task3) BEGIN: the target's grad gains this replica's gradient (a sum, chapter §4),
    // for every parameter that has a gradient on both sides (a frozen one has none). The
    // target's grad stays on its device; every byte that reaches it from elsewhere is recorded
    // in traffic under Phase::reduce. Stuck: tools/hint 02 3 (about 6 lines).
    for (std::size_t j = 0; j < to.size(); ++j) {
      if (!to[j]->grad.defined() || !from[j]->grad.defined()) continue;
      const Tensor incoming = counted_to(from[j]->grad, to[j]->grad.device(), Phase::reduce, traffic);
      add_(to[j]->grad, incoming);
    }
    // TODO(task3) END
  }
}

}  // namespace mgpu::lesson02
