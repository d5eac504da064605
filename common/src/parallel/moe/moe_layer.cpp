// The MoE layer's parts, its names and its balancing bias; forward and backward are in
// moe_forward_backward.cpp.
#include "mgpu/parallel/moe/moe_layer.h"

#include <sstream>

#include "mgpu/error.h"
#include "mgpu/nn/init.h"
#include "mgpu/nn/linear.h"
#include "mgpu/parallel/moe/dispatch_plan.h"
#include "mgpu/parallel/moe/load_balance.h"
#include "mgpu/parallel/moe/local_group.h"

namespace mgpu::parallel::moe {

std::string MoEConfig::str() const {
  std::ostringstream os;
  os << "M=" << dim << " F=" << hidden << " E=" << experts << " k=" << k << " ";
  if (capacity_factor > 0)
    os << "capacity_factor=" << capacity_factor;
  else
    os << "dropless";
  os << " aux=" << aux_alpha << " bias=" << bias_gamma;
  return os.str();
}

namespace detail {
void ExpertList::add(std::int64_t index, std::shared_ptr<ExpertMLP> expert) {
  register_module(std::to_string(index), std::move(expert));
}
Tensor ExpertList::forward(const Tensor&) {
  MGPU_FAIL("ExpertList::forward: the MoE layer runs each expert on the rows routed to it");
}
Tensor ExpertList::backward(const Tensor&) {
  MGPU_FAIL("ExpertList::backward: the MoE layer backpropagates each expert itself");
}
}  // namespace detail

MoE::MoE(const MoEConfig& config) : MoE(config, std::make_shared<LocalGroup>()) {}

MoE::MoE(const MoEConfig& config, std::shared_ptr<dist::ProcessGroup> ep_group)
    : config_(config), group_(std::move(ep_group)) {
  const MoEConfig& c = config_;
  MGPU_CHECK(group_ != nullptr, "MoE: the EP group is null (a rank outside the group?)");
  MGPU_CHECK(c.dim > 0 && c.hidden > 0 && c.experts >= 1, "MoE(", c.str(),
             "): dim, hidden and experts must be positive");
  MGPU_CHECK(c.k >= 1 && c.k <= c.experts, "MoE(", c.str(), "): k must be in 1 .. E");
  MGPU_CHECK(c.experts % group_->size() == 0, "MoE(", c.str(), "): E = ", c.experts,
             " experts do not split over an EP group of ", group_->size(),
             " ranks; choose an EP size that divides E");
  MGPU_CHECK(c.aux_alpha >= 0 && c.bias_gamma >= 0, "MoE(", c.str(),
             "): aux_alpha and bias_gamma must be >= 0");
  // The router first, then experts 0 .. E-1, as one process draws them.
  register_module("router", std::make_shared<nn::Linear>(c.dim, c.experts, /*bias=*/false));
  // How many seeds an expert takes: draw one and put the sequence back.
  const nn::SeedSequenceState start = nn::seed_sequence_state();
  { ExpertMLP probe(c.dim, c.hidden); }
  const std::uint64_t seeds_per_expert = nn::seed_sequence_state().drawn - start.drawn;
  nn::set_seed_sequence_state(start);
  auto list = std::make_shared<detail::ExpertList>();
  for (std::int64_t e = 0; e < c.experts; ++e) {
    if (expert_owner(e, c.experts, group_->size()) == group_->rank()) {
      list->add(e, std::make_shared<ExpertMLP>(c.dim, c.hidden));
    } else {  // held by another rank: skip its seeds
      nn::SeedSequenceState s = nn::seed_sequence_state();
      s.drawn += seeds_per_expert;
      nn::set_seed_sequence_state(s);
    }
  }
  register_module("experts", list);
  bias_.assign(c.experts, 0.0);
  load_.assign(c.experts, 0);
}

std::string MoE::describe() const {
  return "MoE(" + config_.str() + ", ep=" + std::to_string(group_->size()) + ", experts " +
         std::to_string(first_expert()) + ".." +
         std::to_string(first_expert() + local_experts() - 1) + " here)";
}

nn::Parameter& MoE::router_weight() { return static_cast<nn::Linear&>(*child_at(0)).weight(); }

detail::ExpertList& MoE::experts() { return static_cast<detail::ExpertList&>(*child_at(1)); }

ExpertMLP& MoE::local_expert(std::int64_t l) {
  MGPU_CHECK(l >= 0 && l < local_experts(), describe(), ": no local expert ", l);
  return experts().at(static_cast<std::size_t>(l));
}

void MoE::set_expert_bias(std::vector<double> bias) {
  MGPU_CHECK(static_cast<std::int64_t>(bias.size()) == config_.experts, describe(), ": ",
             bias.size(), " biases for E = ", config_.experts, " experts");
  bias_ = std::move(bias);
}

void MoE::update_bias() { update_bias(*group_); }

void MoE::update_bias(dist::ProcessGroup& load_group) {
  if (config_.bias_gamma == 0) return;
  Tensor load = Tensor::from_vector(load_, {config_.experts});
  load_group.all_reduce(load).wait();
  update_expert_bias(bias_, load.to_vector<std::int64_t>(), config_.bias_gamma);
  load_.assign(config_.experts, 0);
}

}  // namespace mgpu::parallel::moe
