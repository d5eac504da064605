// gpt-tiny-moe: the MoE layers put into lesson 12's GPT, found again, and counted.
#include "mgpu/parallel/gpt/moe_gpt.h"

#include <cmath>
#include <memory>
#include <sstream>

#include "mgpu/error.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"

namespace mgpu::parallel::gpt {

const char* balance_name(Balance balance) {
  switch (balance) {
    case Balance::aux: return "aux";
    case Balance::bias: return "bias";
    case Balance::none: return "none";
  }
  return "?";
}

Balance parse_balance(const std::string& name) {
  for (Balance b : {Balance::aux, Balance::bias, Balance::none})
    if (name == balance_name(b)) return b;
  MGPU_FAIL("balance \"", name, "\": choose aux (the auxiliary loss), bias (DeepSeek-V3's bias) "
            "or none");
}

MoEGptConfig MoEGptConfig::tiny() { return MoEGptConfig{}; }

MoEGptConfig MoEGptConfig::balanced(Balance balance) const {
  MoEGptConfig c = *this;
  c.aux_alpha = balance == Balance::aux ? kAuxAlpha : 0.0;
  c.bias_gamma = balance == Balance::bias ? kBiasGamma : 0.0;
  return c;
}

bool MoEGptConfig::is_moe_block(std::int64_t block) const {
  return every >= 1 && block >= first && (block - first) % every == 0;
}

std::int64_t MoEGptConfig::moe_blocks(std::int64_t n_layer) const {
  std::int64_t n = 0;
  for (std::int64_t l = 0; l < n_layer; ++l) n += is_moe_block(l) ? 1 : 0;
  return n;
}

moe::MoEConfig MoEGptConfig::layer(std::int64_t n_embd) const {
  moe::MoEConfig c;
  c.dim = n_embd;
  c.hidden = 4 * n_embd;
  c.experts = experts;
  c.k = k;
  c.capacity_factor = capacity_factor;
  c.aux_alpha = aux_alpha;
  c.bias_gamma = bias_gamma;
  return c;
}

std::string MoEGptConfig::str() const {
  std::ostringstream os;
  os << experts << " experts, k = " << k << ", ";
  if (capacity_factor > 0)
    os << "capacity factor " << capacity_factor;
  else
    os << "dropless";
  os << ", aux " << aux_alpha << ", bias " << bias_gamma << ", blocks " << first << ", "
     << first + every << ", ...";
  return os.str();
}

void use_experts(nn::GPT& model, const MoEGptConfig& moe) {
  const nn::GPTConfig& c = model.config();
  MGPU_CHECK(moe.moe_blocks(c.n_layer) > 0, "use_experts(", moe.str(), "): no block of the ",
             c.n_layer, " holds experts; lower `first` or `every`");
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  const DType dtype = model.parameters().front()->value.dtype();
  const Device device = model.parameters().front()->value.device();
  for (std::int64_t l = 0; l < c.n_layer; ++l) {
    if (!moe.is_moe_block(l)) continue;
    auto layer = std::make_shared<moe::MoE>(moe.layer(c.n_embd));
    // GPT-2's initialisation, as nn::GPT gives the MLP it replaces.
    for (auto& [name, p] : layer->named_parameters()) {
      if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0)
        fill_(p->value, 0.0);
      else
        normal_(p->value, nn::next_seed(), 0.0,
                name.find("fc2.weight") != std::string::npos ? residual_std : 0.02);
    }
    layer->to(dtype);
    layer->to(device);
    auto& block = *model.children().at(static_cast<std::size_t>(2 + l)).second;
    block.replace_child("mlp", layer);
  }
}

std::vector<moe::MoE*> moe_layers(nn::Module& model) {
  std::vector<moe::MoE*> out;
  for (auto& [name, child] : model.children()) {
    if (auto* layer = dynamic_cast<moe::MoE*>(child.get())) {
      out.push_back(layer);
      continue;
    }
    for (moe::MoE* inner : moe_layers(*child)) out.push_back(inner);
  }
  return out;
}

void update_expert_biases(nn::Module& model) {
  for (moe::MoE* layer : moe_layers(model)) layer->update_bias();
}

bool is_expert_parameter(const std::string& name) {
  return name.find(".mlp.experts.") != std::string::npos;
}

MoEParameterCount moe_parameter_count(const nn::GPTConfig& config, const MoEGptConfig& moe) {
  const std::int64_t C = config.n_embd, layers = moe.moe_blocks(config.n_layer);
  const std::int64_t mlp = 8 * C * C + 5 * C;  // Linear(C, 4C) and Linear(4C, C), with biases
  MoEParameterCount count;
  count.dense = config.num_parameters() - layers * mlp + layers * moe.experts * C;
  count.experts = layers * moe.experts * mlp;
  return count;
}

}  // namespace mgpu::parallel::gpt
