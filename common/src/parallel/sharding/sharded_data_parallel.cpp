// ShardedDataParallel: units from a Sequential, their order, the step's schedule, and the
// full parameters gathered or scattered for checkpoints and tests.
#include "mgpu/parallel/sharding/sharded_data_parallel.h"

#include <algorithm>
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/module_sync.h"

namespace mgpu::parallel {

namespace {

bool is_16_bit(DType d) { return d == DType::f16 || d == DType::bf16; }

std::size_t trainable_bytes(nn::Module& layer) {
  std::size_t bytes = 0;
  for (nn::Parameter* p : layer.parameters())
    if (p->requires_grad()) bytes += static_cast<std::size_t>(p->value.numel()) * 4;
  return bytes;
}

}  // namespace

std::vector<std::vector<std::size_t>> group_into_units(nn::Sequential& model,
                                                       std::size_t unit_cap_bytes) {
  std::vector<std::vector<std::size_t>> units;
  std::size_t open_bytes = 0;  // trainable bytes of the unit being filled
  for (std::size_t i = 0; i < model.size(); ++i) {
    const std::size_t bytes = trainable_bytes(model[i]);
    // A layer with parameters starts a new unit once the open one has reached the cap.
    if (units.empty() || (bytes > 0 && open_bytes > 0 && open_bytes >= unit_cap_bytes)) {
      units.emplace_back();
      open_bytes = 0;
    }
    units.back().push_back(i);
    open_bytes += bytes;
  }
  MGPU_CHECK(!units.empty(), "ShardedDataParallel: the model has no layer");
  // Leading layers without parameters join the first unit with some, trailing ones the
  // last: a unit without parameters means the model has none.
  for (const auto& u : units) {
    std::size_t b = 0;
    for (std::size_t i : u) b += trainable_bytes(model[i]);
    MGPU_CHECK(b > 0, "ShardedDataParallel: the model has no trainable parameter to shard");
  }
  return units;
}

ShardedDataParallel::ShardedDataParallel(std::shared_ptr<nn::Sequential> model,
                                         dist::ProcessGroup& group, ShardingOptions options)
    : model_(std::move(model)), group_(group), options_(options) {
  MGPU_CHECK(model_ != nullptr, "ShardedDataParallel: the model is null");
  MGPU_CHECK(options_.stage >= 1 && options_.stage <= 3, "ShardedDataParallel: stage ",
             options_.stage, "; choose 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters)");
  MGPU_CHECK(options_.compute_dtype == DType::f32 || is_16_bit(options_.compute_dtype),
             "ShardedDataParallel: compute dtype ", dtype_name(options_.compute_dtype),
             "; choose f32, bf16 or f16");
  // Step 1) every rank built the same model? Then rank 0's values everywhere.
  verify_params_across_ranks(*model_, group_);
  broadcast_module_state(*model_, group_, 0);

  // Step 2) the units: consecutive layers, each unit's parameters flattened and sharded.
  // A unit with running statistics (BatchNorm) computes in fp32: they need fp32 inputs.
  const auto groups = group_into_units(*model_, options_.unit_cap_bytes);
  for (std::size_t k = 0; k < groups.size(); ++k) {
    std::vector<std::shared_ptr<nn::Module>> layers;
    bool has_buffers = false;
    for (std::size_t i : groups[k]) {
      layers.push_back(model_->at(i));
      has_buffers = has_buffers || !model_->at(i)->named_buffers().empty();
    }
    const DType dtype = has_buffers ? DType::f32 : options_.compute_dtype;
    units_.push_back(std::make_unique<ShardedUnit>(k, std::move(layers), group_, options_.stage,
                                                   dtype, &log_));
    // The optimizer's parameters are the master shards: parameters() of this module.
    const std::size_t at = register_parameter("flat_param_" + std::to_string(k),
                                              units_[k]->master_value());
    units_[k]->attach_shard(&parameter_at(at));
  }
  // Step 3) the prefetch order: forward walks the units up, backward down.
  for (std::size_t k = 0; k < units_.size() && options_.prefetch; ++k)
    units_[k]->set_prefetch(k + 1 < units_.size() ? units_[k + 1].get() : nullptr,
                            k > 0 ? units_[k - 1].get() : nullptr);
  train(model_->is_training());
}

ShardedDataParallel::~ShardedDataParallel() = default;

Tensor ShardedDataParallel::forward(const Tensor& x) {
  // The wrapped model is not a child (its parameters are not ours): follow our mode.
  if (model_->is_training() != is_training()) model_->train(is_training());
  Tensor h = x;
  for (auto& unit : units_) h = unit->forward(h);
  return is_16_bit(h.dtype()) ? cast(h, DType::f32) : h;
}

Tensor ShardedDataParallel::backward(const Tensor& grad_out) {
  Tensor g = grad_out;
  for (std::size_t k = units_.size(); k-- > 0;) {
    g = units_[k]->backward(g);
    // Unit k+1's reduction ran on the communication thread while unit k computed; finish
    // it now, so that at most two units' full gradients exist at once.
    if (k + 1 < units_.size()) units_[k + 1]->finish_grad_reduction();
  }
  if (!units_.empty()) units_[0]->finish_grad_reduction();
  // The optimizer steps the shards next: the full parameters are stale from here on.
  for (auto& unit : units_) unit->mark_stale();
  return is_16_bit(g.dtype()) ? cast(g, DType::f32) : g;
}

std::shared_ptr<nn::Module> ShardedDataParallel::clone() const {
  MGPU_FAIL("ShardedDataParallel::clone: a sharded model is tied to its process group; clone "
            "the model before wrapping it");
}

std::string ShardedDataParallel::describe() const {
  std::ostringstream os;
  os << "ShardedDataParallel(stage=" << options_.stage << ", world_size=" << group_.size()
     << ", units=" << units_.size() << ", compute=" << dtype_name(options_.compute_dtype)
     << ", prefetch=" << (options_.prefetch ? "true" : "false") << ")";
  return os.str();
}

std::string ShardedDataParallel::unit_summary() const {
  std::ostringstream os;
  for (std::size_t k = 0; k < units_.size(); ++k) os << (k ? "\n" : "") << units_[k]->describe();
  return os.str();
}

MemoryPrediction ShardedDataParallel::predicted_memory() const {
  std::vector<UnitShape> shapes;
  for (const auto& u : units_) shapes.push_back(UnitShape{u->layout().padded_numel, u->compute_dtype()});
  return predict_memory(options_.stage, shapes, group_.size(), options_.prefetch);
}

void ShardedDataParallel::mark_parameters_stale() {
  for (auto& unit : units_) unit->mark_stale();
}

void ShardedDataParallel::sync_buffers() {
  if (group_.size() > 1) broadcast_buffers(*model_, group_, 0);
}

std::map<std::string, Tensor> ShardedDataParallel::full_parameters() {
  std::map<std::string, Tensor> out;
  for (auto& unit : units_) {
    // Every rank's fp32 master shard, one after another: the unit's flat parameter.
    const FlatLayout& layout = unit->layout();
    Tensor flat = Tensor::empty({layout.padded_numel}, DType::f32, unit->shard()->value.device());
    group_.all_gather(flat, unit->shard()->value).wait();
    std::vector<Tensor> views = param_views(layout, flat);
    for (std::size_t i = 0; i < views.size(); ++i) out[layout.slots[i].name] = views[i];
  }
  for (nn::Parameter* p : model_->parameters())  // frozen ones are not sharded
    if (!p->requires_grad()) out[p->name()] = p->value.clone();
  return out;
}

void ShardedDataParallel::load_full_parameters(const std::map<std::string, Tensor>& values) {
  auto find = [&](const std::string& name, const Shape& shape) -> const Tensor& {
    auto it = values.find(name);
    MGPU_CHECK(it != values.end(), "ShardedDataParallel::load_full_parameters: no value for '",
               name, "'");
    MGPU_CHECK(it->second.shape() == shape, "ShardedDataParallel::load_full_parameters: '", name,
               "' is ", it->second.str(), " but the parameter is ", shape_str(shape));
    return it->second;
  };
  // Every name and shape first, on every rank (not only the pieces this rank owns): a
  // refused load changes nothing anywhere.
  for (auto& unit : units_)
    for (const FlatSlot& slot : unit->layout().slots) find(slot.name, slot.shape);
  for (nn::Parameter* p : model_->parameters())
    if (!p->requires_grad()) find(p->name(), p->value.shape());
  for (auto& unit : units_) {
    const FlatLayout& layout = unit->layout();
    Tensor& shard = unit->shard()->value;
    // Each piece of a parameter in this rank's shard, copied from the full value.
    for (const ShardPiece& piece : shard_pieces(layout, group_.rank())) {
      const FlatSlot& slot = layout.slots[piece.slot];
      const Tensor full = find(slot.name, slot.shape).to(shard.device()).to(DType::f32);
      Tensor dst = shard.view(piece.shard_offset, {piece.numel});
      copy_(dst, full.reshape({slot.numel}).view(piece.param_offset, {piece.numel}));
    }
  }
  for (nn::Parameter* p : model_->parameters())
    if (!p->requires_grad()) copy_(p->value, find(p->name(), p->value.shape()));
  mark_parameters_stale();
}

}  // namespace mgpu::parallel
