// ShardedUnit: construction (the flat buffers, the master shard, the views), hooks and the
// helpers lesson 10's methods use. The methods that make the algorithm (gather, reduce,
// the unit's forward/backward cycle) are lessons/10_sharding/{gather,reduce_grads,
// unit_cycle}.cpp, reference in solutions/10_sharding/.
#include "mgpu/parallel/sharding/sharded_unit.h"

#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/ops.h"

namespace mgpu::parallel {

ShardedUnit::ShardedUnit(std::size_t index, std::vector<std::shared_ptr<nn::Module>> layers,
                         dist::ProcessGroup& group, int stage, DType compute_dtype, CommLog* log)
    : index_(index),
      layers_(std::move(layers)),
      group_(group),
      stage_(stage),
      compute_dtype_(compute_dtype),
      rank_(group.rank()),
      world_(group.size()),
      log_(log) {
  MGPU_CHECK(stage >= 1 && stage <= 3, "ShardedUnit: ZeRO stage ", stage, " (1, 2 or 3)");
  MGPU_CHECK(compute_dtype == DType::f32 || compute_dtype == DType::bf16 ||
                 compute_dtype == DType::f16,
             "ShardedUnit: compute dtype ", dtype_name(compute_dtype), " (f32, bf16 or f16)");
  // Step 1) the trainable parameters, in layer order; frozen ones stay as they are.
  std::vector<std::pair<std::string, Shape>> specs;
  for (const auto& layer : layers_)
    for (nn::Parameter* p : layer->parameters()) {
      if (!p->requires_grad()) continue;
      MGPU_CHECK(p->value.dtype() == DType::f32, "ShardedDataParallel: parameter '", p->name(),
                 "' is ", p->value.str(), "; sharding needs f32 parameters (the fp32 master "
                 "copy); ask for 16-bit compute with ShardingOptions::compute_dtype instead");
      MGPU_CHECK(params_.empty() || p->value.device() == params_[0]->value.device(),
                 "ShardedDataParallel: parameter '", p->name(), "' is on ", p->value.device().str(),
                 " but '", params_[0]->name(), "' on ", params_[0]->value.device().str(),
                 " (model.to(device) first)");
      params_.push_back(p);
      specs.emplace_back(p->name(), p->value.shape());
    }
  layout_ = make_flat_layout(specs, world_);
  const Device device = params_[0]->value.device();

  // Step 2) every parameter's current value into one fp32 flat buffer (padding: zeros).
  Tensor flat32 = Tensor::zeros({layout_.padded_numel}, DType::f32, device);
  std::vector<Tensor> views32 = param_views(layout_, flat32);
  for (std::size_t i = 0; i < params_.size(); ++i) copy_(views32[i], params_[i]->value);

  // Step 3) the master shard: this rank's chunk. At fp32 stages 1-2 the full buffer stays
  // and the master shard is its own chunk (no copy); otherwise the shard is kept apart and
  // the full buffer holds the compute copy.
  if (compute_dtype_ == DType::f32 && stage_ < 3) {
    full_ = flat32;
    master_value_ = own_chunk(full_);
  } else {
    master_value_ = own_chunk(flat32).clone();
    full_ = compute_dtype_ == DType::f32 ? flat32 : cast(flat32, compute_dtype_);
  }
  flat32 = Tensor();

  // Step 4) the layers' parameters become views of the full buffer (their old storage goes);
  // gradients: views of a persistent buffer at stage 1, made per backward at stages 2-3.
  std::vector<Tensor> views = param_views(layout_, full_);
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i]->value = views[i];
  if (stage_ == 1) {
    full_grad_ = Tensor::zeros({layout_.padded_numel}, compute_dtype_, device);
    std::vector<Tensor> grads = param_views(layout_, full_grad_);
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i]->grad = grads[i];
  } else {
    for (nn::Parameter* p : params_) p->grad = Tensor();
  }
  // Step 5) fully sharded: only the shard stays until the first forward gathers.
  if (stage_ == 3) {
    full_.storage()->release();
    state_ = UnitState::sharded;
  }
  for (nn::Parameter* p : params_)
    hook_handles_.push_back(p->add_grad_ready_hook([this](nn::Parameter&) { on_grad_ready(); }));
}

ShardedUnit::~ShardedUnit() {
  for (std::size_t i = 0; i < params_.size() && i < hook_handles_.size(); ++i)
    params_[i]->remove_grad_ready_hook(hook_handles_[i]);
  // No collective may outlive the unit that issued it.
  for (const dist::Work* w : {&gather_work_, &reduce_work_}) {
    try {
      w->wait();
    } catch (...) {  // a destructor must not throw; the waiter reported the error
    }
  }
}

void ShardedUnit::attach_shard(nn::Parameter* shard) {
  MGPU_CHECK(shard != nullptr && shard->value.shares_storage(master_value_) &&
                 shard->value.offset() == master_value_.offset() &&
                 shard->value.numel() == master_value_.numel(),
             "ShardedUnit::attach_shard: the parameter must hold master_value()");
  shard_ = shard;
}

void ShardedUnit::set_prefetch(ShardedUnit* next_in_forward, ShardedUnit* next_in_backward) {
  prefetch_forward_ = next_in_forward;
  prefetch_backward_ = next_in_backward;
}

void ShardedUnit::mark_stale() {
  MGPU_CHECK(state_ != UnitState::gathering, "unit ", index_,
             ": an all-gather is still in flight; wait_gather() first");
  state_ = UnitState::sharded;
}

std::string ShardedUnit::describe() const {
  std::ostringstream os;
  os << "unit " << index_ << ": layers";
  for (const auto& layer : layers_) os << " " << layer->describe();
  os << "; " << layout_.numel << " elements";
  if (layout_.padded_numel > layout_.numel) os << " + " << layout_.padded_numel - layout_.numel << " padding";
  os << ", shard " << layout_.shard_numel << ", " << dtype_name(compute_dtype_);
  return os.str();
}

Tensor ShardedUnit::to_compute(const Tensor& x) const {
  const bool floating = x.dtype() == DType::f32 || x.dtype() == DType::f16 ||
                        x.dtype() == DType::bf16 || x.dtype() == DType::f64;
  return floating && x.dtype() != compute_dtype_ ? cast(x, compute_dtype_) : x;
}

Tensor ShardedUnit::run_forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& layer : layers_) h = layer->forward(h);
  return h;
}

Tensor ShardedUnit::run_backward(const Tensor& grad_out) {
  Tensor g = grad_out;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = (*it)->backward(g);
  return g;
}

void ShardedUnit::begin_backward() {
  MGPU_CHECK(!reduction_launched_, "ShardedDataParallel: unit ", index_, "'s previous gradient "
             "reduction was never finished (call the ShardedDataParallel's backward, not the "
             "model's)");
  if (stage_ == 1) {
    fill_(full_grad_, 0.0);  // param.grad holds this backward's averaged gradient afterwards
  } else {
    full_grad_ = Tensor::zeros({layout_.padded_numel}, compute_dtype_, full_.device());
    std::vector<Tensor> grads = param_views(layout_, full_grad_);
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i]->grad = grads[i];
  }
  pending_grads_ = params_.size();
  armed_ = true;
}

void ShardedUnit::end_backward() {
  // A parameter that took no part in this forward never fired its hook: its gradient is
  // the zeros it started with, and the reduction starts now.
  if (armed_) {
    armed_ = false;
    launch_grad_reduction();
  }
}

Tensor ShardedUnit::own_chunk(const Tensor& flat) const {
  return flat.view(layout_.shard_begin(rank_), {layout_.shard_numel});
}

void ShardedUnit::log(const char* op, const Tensor& full_buffer, const dist::Work& work) {
  if (log_ != nullptr) log_->record(index_, op, full_buffer.nbytes(), work, clock_s());
}

}  // namespace mgpu::parallel
