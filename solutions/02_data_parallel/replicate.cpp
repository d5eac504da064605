// Task 2: one model per device (replicate) and the per-step copy of the weights from
// device 0 to every replica (broadcast). PyTorch: torch.nn.parallel.replicate, which
// DataParallel calls on every forward; here the replicas are built once and refreshed.
#include "data_parallel.h"

namespace mgpu::lesson02 {

std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices) {
  MGPU_CHECK(module != nullptr, "replicate: the module is null");
  MGPU_CHECK(!devices.empty(), "replicate: no devices given");
  MGPU_CHECK(module->device() == devices[0], "replicate: the module lives on ",
             module->device().str(), " but devices[0] is ", devices[0].str(),
             "; move it first: model->to(", devices[0].str(), ")");
  std::vector<std::shared_ptr<nn::Module>> replicas;
  // What you have: module->clone() -> a deep copy; m->to(device) moves a module.
  // TODO(task2) BEGIN: one model per device (chapter §3), replicas[i] for devices[i].
  // Invariants: replicas[0] IS `module`, not a copy (the optimizer holds its parameters);
  // replica i >= 1 is a copy of its own, sharing no storage with the module, that lives on
  // devices[i]. Stuck: tools/hint 02 2 (about 5 lines).
  replicas.push_back(module);
  for (std::size_t i = 1; i < devices.size(); ++i) {
    std::shared_ptr<nn::Module> copy = module->clone();
    copy->to(devices[i]);
    replicas.push_back(std::move(copy));
  }
  // TODO(task2) END
  return replicas;
}

void broadcast_parameters(nn::Module& source, const std::vector<std::shared_ptr<nn::Module>>& replicas,
                          Traffic* traffic) {
  const std::vector<nn::Parameter*> from_params = source.parameters();
  const std::vector<std::pair<std::string, Tensor*>> from_buffers = source.named_buffers();
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    MGPU_CHECK(replicas[r] != nullptr, "broadcast_parameters: replica ", r, " is null");
    nn::Module& replica = *replicas[r];
    if (&replica == &source) continue;  // replica 0 is the module itself
    const std::vector<nn::Parameter*> to_params = replica.parameters();
    const std::vector<std::pair<std::string, Tensor*>> to_buffers = replica.named_buffers();
    MGPU_CHECK(to_params.size() == from_params.size() && to_buffers.size() == from_buffers.size(),
               "broadcast_parameters: replica ", r, " has ", to_params.size(), " parameters and ",
               to_buffers.size(), " buffers, the source ", from_params.size(), " and ",
               from_buffers.size(), "; replicas must be copies of the source (replicate())");
    // What you have: counted_copy(dst, src, Phase::broadcast, traffic); from_buffers/to_buffers
    // and from_params/to_params (matched by position); is_training(), train(on).
    // TODO(task2) BEGIN: afterwards this replica computes exactly what the source would: the
    // same parameter values, the same buffers, the same training mode (chapter §3). The
    // values land in the replica's own tensors, on its device; every byte is recorded in
    // traffic under Phase::broadcast. Stuck: tools/hint 02 2 (about 6 lines).
    for (std::size_t j = 0; j < from_params.size(); ++j)
      counted_copy(to_params[j]->value, from_params[j]->value, Phase::broadcast, traffic);
    for (std::size_t j = 0; j < from_buffers.size(); ++j)
      counted_copy(*to_buffers[j].second, *from_buffers[j].second, Phase::broadcast, traffic);
    replica.train(source.is_training());
    // TODO(task2) END
  }
}

}  // namespace mgpu::lesson02
