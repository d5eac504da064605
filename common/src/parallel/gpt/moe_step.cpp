// A ParallelGpt's MoE layers (moe_gpt.h): this rank's experts under EP, and what the step
// adds for them: the auxiliary losses, the gradients reduced as lesson 16's
// expert_grad_groups says, the balancing biases.
#include <memory>

#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/gpt/moe_gpt.h"
#include "mgpu/parallel/tp/parallel_block.h"
#include "parallel_gpt_impl.h"

namespace mgpu::parallel::gpt {

void place_experts(nn::Module& block, const grid::ProcessGrid& grid) {
  if (grid.shape().ep == 1) return;
  std::shared_ptr<moe::MoE> whole;
  for (const auto& [name, child] : block.children())
    if (name == "mlp") whole = std::dynamic_pointer_cast<moe::MoE>(child);
  if (!whole) return;
  // The layer draws its weights from the seed sequence: put the sequence back afterwards,
  // as the weights are the full model's (copied by name below).
  const nn::SeedSequenceState seeds = nn::seed_sequence_state();
  auto mine = std::make_shared<moe::MoE>(whole->config(), grid.ep_group());
  nn::set_seed_sequence_state(seeds);
  const DType dtype = whole->router_weight().value.dtype();
  const Device device = whole->router_weight().value.device();
  mine->to(dtype);
  mine->to(device);
  for (auto& [name, p] : mine->named_parameters()) copy_(p->value, whole->parameter(name).value);
  mine->set_expert_bias(whole->expert_bias());
  block.replace_child("mlp", mine);
}

double ParallelGpt::Impl::moe_aux_loss() const {
  double aux = 0;
  for (const moe::MoE* layer : moes) aux += layer->stats().aux_loss;
  return aux;
}

void ParallelGpt::Impl::reduce_moe_grads() {
  dist::ProcessGroup& data = data_group();
  auto reduce = [&](const std::vector<std::string>& names, dist::ProcessGroup& group,
                    const moe::GradReduction& rule) {
    MGPU_CHECK(static_cast<int>(rule.ranks.size()) == group.size(), "ParallelGpt: lesson 16's "
               "rule sums over ", rule.ranks.size(), " rank(s), the grid's group has ",
               group.size(), " (expert_grad_groups)");
    if (names.empty()) return;
    if (group.size() > 1) tp::all_reduce_replicated_grads(*parts, names, group);  // one all-reduce
    if (rule.scale != 1)
      for (const std::string& name : names) scale_(parts->parameter(name).grad, rule.scale);
  };
  reduce(dense_names, data, expert_rule.dense);
  if (plan.shape.ep > 1) reduce(expert_names, grid->expert_data_group(), expert_rule.expert);
}

void ParallelGpt::Impl::update_moe_biases() {
  for (moe::MoE* layer : moes) layer->update_bias(data_group());
}

}  // namespace mgpu::parallel::gpt
