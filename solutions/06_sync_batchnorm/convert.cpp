// Lesson 06, task 4: convert_sync_batchnorm, BatchNorm -> your SyncBatchNorm in a tree.
#include <string>
#include <vector>

#include "mgpu/nn/batchnorm.h"
#include "mgpu/parallel/sync_bn/sync_batchnorm.h"

namespace mgpu::parallel {

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   dist::ProcessGroup* process_group) {
  MGPU_CHECK(module != nullptr, "convert_sync_batchnorm: module is null");
  // What you have: dynamic_cast<nn::BatchNorm*>(m) (BatchNorm1d and 2d derive from it) and
  // its affine(), bias(), device(), dtype(), eps(), is_training(), momentum(),
  // num_batches_tracked(), num_features(), running_mean(), running_var(), weight();
  // module->children() (name, child pairs) and module->replace_child(name, new_child); a
  // Module's to(dtype), to(device) and train(on); Parameter's grad, requires_grad(),
  // set_requires_grad() and value; SyncBatchNorm(C, eps, momentum, affine,
  // track_running_stats, group) and the same accessors (running_mean() etc. return Tensor&:
  // assigning a Tensor handle shares its storage).
  // TODO(task4) BEGIN: chapter §7's conversion. A BatchNorm root gives a new SyncBatchNorm
  // with its settings, dtype, device and training mode, sharing its weight and bias (value,
  // grad, requires_grad) and its three buffers. Any other module comes back itself, with
  // every BatchNorm below it, at any depth, replaced in place under the same name. Stuck:
  // tools/hint 06 4 (about 25 lines).
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(module.get())) {
    auto sync = std::make_shared<SyncBatchNorm>(bn->num_features(), bn->eps(), bn->momentum(),
                                                bn->affine(), true, process_group);
    sync->to(bn->dtype());
    sync->to(bn->device());
    if (bn->affine()) {
      for (auto [mine, theirs] : {std::pair{&sync->weight(), &bn->weight()},
                                  std::pair{&sync->bias(), &bn->bias()}}) {
        mine->set_requires_grad(theirs->requires_grad());
        mine->value = theirs->value;
        mine->grad = theirs->grad;
      }
    }
    sync->running_mean() = bn->running_mean();
    sync->running_var() = bn->running_var();
    sync->num_batches_tracked() = bn->num_batches_tracked();
    sync->train(bn->is_training());
    return sync;
  }
  std::vector<std::string> names;
  for (const auto& child : module->children()) names.push_back(child.first);
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::shared_ptr<nn::Module> child = module->children()[i].second;
    std::shared_ptr<nn::Module> converted = convert_sync_batchnorm(child, process_group);
    if (converted != child) module->replace_child(names[i], converted);
  }
  return module;
  // TODO(task4) END
}

}  // namespace mgpu::parallel
