// Optimizer: parameter list, zero_grad, and the named state shared by SGD and AdamW.
#include "mgpu/optim/optimizer.h"

#include <algorithm>
#include <set>

namespace mgpu::optim {

Optimizer::Optimizer(std::vector<nn::Parameter*> params, double lr)
    : params_(std::move(params)), lr_(lr) {
  std::set<std::string> names;
  for (nn::Parameter* p : params_) {
    MGPU_CHECK(p != nullptr, "Optimizer: a parameter pointer is null");
    // State is keyed by name, so two parameters with one name would share state.
    MGPU_CHECK(names.insert(p->name()).second, "Optimizer: two parameters are named '",
               p->name(), "' (pass model.parameters() of one model, or rename)");
  }
  MGPU_CHECK(lr >= 0, "Optimizer: learning rate ", lr, " is negative");
}

void Optimizer::zero_grad() {
  for (nn::Parameter* p : params_) p->zero_grad();
}

Tensor* Optimizer::find_state(const nn::Parameter& p, const std::string& key) {
  auto it = state_.find(p.name() + "." + key);
  return it == state_.end() ? nullptr : &it->second;
}

Tensor& Optimizer::set_state(const nn::Parameter& p, const std::string& key, Tensor value) {
  Tensor& slot = state_[p.name() + "." + key];
  slot = std::move(value);
  return slot;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> loaded;
  for (const auto& [name, t] : state) {
    const nn::Parameter* owner = nullptr;
    std::string key;
    for (const nn::Parameter* p : params_) {
      const std::string prefix = p->name() + ".";
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string rest = name.substr(prefix.size());
      const auto keys = state_keys();
      if (std::find(keys.begin(), keys.end(), rest) != keys.end()) {
        owner = p;
        key = rest;
      }
    }
    MGPU_CHECK(owner != nullptr, describe(), ": load_state: '", name,
               "' is not a state of any parameter of this optimizer");
    if (key == "step") {
      MGPU_CHECK(t.numel() == 1, describe(), ": load_state: '", name, "' is ", t.str(),
                 ", expected one step count");
      loaded[name] = t.to(Device::cpu()).to(DType::i64).clone();
    } else {
      MGPU_CHECK(t.shape() == owner->value.shape(), describe(), ": load_state: '", name,
                 "' is ", t.str(), " but the parameter is ", owner->value.str());
      loaded[name] = t.to(owner->value.device()).to(owner->value.dtype()).clone();
    }
  }
  // Strict: a state that is not empty (the optimizer has stepped) has every state tensor of
  // every parameter it trains; a missing one would silently restart from zero.
  if (!loaded.empty())
    for (const nn::Parameter* p : params_) {
      if (!p->requires_grad()) continue;
      for (const std::string& key : state_keys())
        MGPU_CHECK(loaded.count(p->name() + "." + key) != 0, describe(), ": load_state: '",
                   p->name(), ".", key, "' is missing (the state has other parameters' ", key,
                   "; every trained parameter has one)");
    }
  state_ = std::move(loaded);
}

}  // namespace mgpu::optim
