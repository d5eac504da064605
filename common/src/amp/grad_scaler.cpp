// GradScaler: the per-optimizer stages, the checks PyTorch makes, and the skip decision.
#include "mgpu/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "mgpu/amp/scaling.h"
#include "mgpu/ops.h"

namespace mgpu::amp {

namespace {
const char* const kScaleFix =
    " This may indicate your script did not use scaler.scale(loss or outputs) earlier in the "
    "iteration.";
}  // namespace

GradScaler::GradScaler(GradScalerOptions options, dist::ProcessGroup* agree_across)
    : options_(options), group_(agree_across), init_scale_(options.init_scale) {
  if (options_.enabled) {
    MGPU_CHECK(options_.growth_factor > 1.0, "GradScaler: growth_factor is ",
               options_.growth_factor, "; the growth factor must be > 1.0");
    MGPU_CHECK(options_.backoff_factor < 1.0, "GradScaler: backoff_factor is ",
               options_.backoff_factor, "; the backoff factor must be < 1.0");
  }
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!options_.enabled) return outputs;
  check_defined("GradScaler::scale", outputs, "outputs");
  if (!initialized_) {
    // Lazy initialization, as in PyTorch: the scale exists from the first scale() on.
    scale_ = static_cast<float>(init_scale_);
    growth_tracker_ = init_growth_tracker_;
    initialized_ = true;
  }
  return mgpu::scale(outputs, scale_);
}

void GradScaler::check_scale_initialized(const char* funcname) const {
  MGPU_CHECK(initialized_, "GradScaler: Attempted ", funcname,
             " but _scale is None (the scale is not initialized).", kScaleFix);
}

GradScaler::OptimizerState& GradScaler::optimizer_state(const optim::Optimizer& optimizer) {
  return states_[&optimizer];
}

std::map<std::string, Tensor> GradScaler::unscale_grads_(optim::Optimizer& optimizer,
                                                         float inv_scale, bool allow_fp16) {
  // Step 1) group the gradients by device: one found_inf flag per device, on that device.
  std::map<std::string, std::vector<Tensor>> grads_per_device;
  std::map<std::string, Device> devices;
  for (nn::Parameter* p : optimizer.params()) {
    if (!p->requires_grad() || !p->grad.defined()) continue;
    MGPU_CHECK(allow_fp16 || p->grad.dtype() != DType::f16,
               "GradScaler: Attempting to unscale FP16 gradients. (parameter '", p->name(), "' is ",
               p->grad.str(), "). Keep the parameters in f32 (master weights) and compute in f16 "
               "inside an amp::Autocast region instead of converting the model with to(f16)");
    grads_per_device[p->grad.device().str()].push_back(p->grad);
    devices.emplace(p->grad.device().str(), p->grad.device());
  }
  // Step 2) one fused pass per device: check for inf/NaN and multiply by 1/scale.
  std::map<std::string, Tensor> found_inf_per_device;
  for (auto& [name, grads] : grads_per_device) {
    Tensor found_inf = Tensor::zeros({}, DType::f32, devices.at(name));
    non_finite_check_and_unscale_(grads, found_inf, inv_scale);
    found_inf_per_device.emplace(name, found_inf);
  }
  return found_inf_per_device;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    last_step_skipped_ = false;
    return true;
  }
  check_scale_initialized("step");
  OptimizerState& state = optimizer_state(optimizer);
  MGPU_CHECK(state.stage != Stage::stepped,
             "GradScaler: step() has already been called since the last update(); call "
             "scaler.update() once at the end of every iteration");
  if (state.stage == Stage::ready) unscale_(optimizer);
  MGPU_CHECK(!state.found_inf_per_device.empty(),
             "GradScaler: no inf checks were recorded for this optimizer (none of its "
             "parameters has a gradient: did backward run?)");
  // Reading the flags waits for the device: the one wait of an iteration.
  bool found_inf = false;
  for (const auto& entry : state.found_inf_per_device) found_inf = found_inf || entry.second.item() != 0.0;
  if (!found_inf) optimizer.step();
  state.stage = Stage::stepped;
  last_step_skipped_ = found_inf;
  return !found_inf;
}

void GradScaler::update_scale_(bool found_inf) {
  update_scale(scale_, growth_tracker_, found_inf, options_.growth_factor,
               options_.backoff_factor, options_.growth_interval);
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_scale_initialized("update");
  // The sum of every optimizer's flags on every device: non-zero if any found an inf/NaN.
  double found_inf_combined = 0.0;
  bool recorded = false;
  for (const auto& entry : states_)
    for (const auto& flag : entry.second.found_inf_per_device) {
      found_inf_combined += flag.second.item();
      recorded = true;
    }
  MGPU_CHECK(recorded,
             "GradScaler: no inf checks were recorded prior to update(); call scaler.step(optimizer) "
             "(or scaler.unscale_(optimizer)) before scaler.update()");
  update_scale_(found_inf_combined != 0.0);
  states_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale_initialized("update");
  scale_ = static_cast<float>(new_scale);
  states_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return initialized_ ? static_cast<double>(scale_) : init_scale_;
}

std::int32_t GradScaler::growth_tracker() const {
  if (!options_.enabled) return 0;
  return initialized_ ? growth_tracker_ : init_growth_tracker_;
}

ScalerState GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(growth_tracker())}};
}

void GradScaler::load_state_dict(const ScalerState& state) {
  if (!options_.enabled) return;
  MGPU_CHECK(!state.empty(),
             "GradScaler::load_state_dict: the source state dict is empty, possibly because it "
             "was saved from a disabled instance of GradScaler");
  auto get = [&](const char* key) {
    auto it = state.find(key);
    MGPU_CHECK(it != state.end(), "GradScaler::load_state_dict: the state has no '", key,
               "' (expected scale, growth_factor, backoff_factor, growth_interval, "
               "_growth_tracker, as state_dict() writes them)");
    return it->second;
  };
  auto get_int = [&](const char* key) {
    const double v = get(key);
    MGPU_CHECK(std::floor(v) == v && std::fabs(v) < 2147483648.0, "GradScaler::load_state_dict: '",
               key, "' is ", v, ", expected an integer");
    return static_cast<std::int64_t>(v);
  };
  init_scale_ = get("scale");
  if (initialized_) scale_ = static_cast<float>(init_scale_);
  options_.growth_factor = get("growth_factor");
  options_.backoff_factor = get("backoff_factor");
  options_.growth_interval = get_int("growth_interval");
  init_growth_tracker_ = static_cast<std::int32_t>(get_int("_growth_tracker"));
  if (initialized_) growth_tracker_ = init_growth_tracker_;
}

}  // namespace mgpu::amp
