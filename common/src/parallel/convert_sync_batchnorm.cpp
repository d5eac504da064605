// convert_sync_batchnorm: every BatchNorm1d/2d of a module tree becomes a SyncBatchNorm
// that shares its parameters and running buffers (PyTorch's
// SyncBatchNorm.convert_sync_batchnorm).
#include <string>
#include <vector>

#include "mgpu/nn/batchnorm.h"
#include "mgpu/parallel/sync_batchnorm.h"

namespace mgpu::parallel {

namespace {

/// dst becomes the same parameter as src: the same value and gradient storage, frozen or not.
void share_parameter(nn::Parameter& dst, nn::Parameter& src) {
  dst.set_requires_grad(src.requires_grad());
  dst.value = src.value;
  dst.grad = src.grad;
}

std::shared_ptr<SyncBatchNorm> sync_twin(nn::BatchNorm& bn, dist::ProcessGroup* group) {
  auto s = std::make_shared<SyncBatchNorm>(bn.num_features(), bn.eps(), bn.momentum(),
                                           bn.affine(), /*track_running_stats=*/true, group);
  s->to(bn.dtype());  // so that device() and dtype() report what the shared tensors hold
  s->to(bn.device());
  if (bn.affine()) {
    share_parameter(s->weight(), bn.weight());
    share_parameter(s->bias(), bn.bias());
  }
  // Tensor handles share storage: both layers now read and update the same buffers.
  s->running_mean() = bn.running_mean();
  s->running_var() = bn.running_var();
  s->num_batches_tracked() = bn.num_batches_tracked();
  s->train(bn.is_training());
  return s;
}

}  // namespace

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   dist::ProcessGroup* process_group) {
  MGPU_CHECK(module != nullptr, "convert_sync_batchnorm: module is null");
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(module.get())) return sync_twin(*bn, process_group);
  // Names first: replace_child changes the list being walked.
  std::vector<std::string> names;
  for (const auto& child : module->children()) names.push_back(child.first);
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::shared_ptr<nn::Module> child = module->children()[i].second;
    std::shared_ptr<nn::Module> converted = convert_sync_batchnorm(child, process_group);
    if (converted != child) module->replace_child(names[i], converted);
  }
  return module;
}

}  // namespace mgpu::parallel
