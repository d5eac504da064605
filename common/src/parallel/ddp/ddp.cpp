// DistributedDataParallel: construction checks, the broadcast from rank 0, forward/backward.
#include "mgpu/parallel/ddp/ddp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <sstream>

#include "mgpu/parallel/module_sync.h"

namespace mgpu::parallel {

namespace {

std::size_t mib_to_bytes(double mib, const char* what) {
  MGPU_CHECK(mib >= 0 && !std::isnan(mib), "DistributedDataParallel: ", what, " = ", mib,
             " MiB; give a size >= 0 (a huge value puts everything in one bucket)");
  const double bytes = mib * 1024.0 * 1024.0;
  if (bytes >= static_cast<double>(std::numeric_limits<std::size_t>::max() / 2))
    return std::numeric_limits<std::size_t>::max() / 2;
  return static_cast<std::size_t>(bytes);
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 dist::ProcessGroup& group, DDPOptions options)
    : module_(std::move(module)), group_(group), options_(std::move(options)) {
  MGPU_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  // Step 1) every rank built the same model? Then rank 0's weights and buffers everywhere.
  verify_params_across_ranks(*module_, group_);
  broadcast_module_state(*module_, group_, 0);

  // Step 2) the parameters to synchronize: frozen ones take no part.
  std::vector<nn::Parameter*> params;
  std::vector<GradSpec> specs;
  for (nn::Parameter* p : module_->parameters()) {
    if (!p->requires_grad()) continue;
    params.push_back(p);
    specs.push_back(GradSpec{p->value.nbytes(), p->value.dtype()});
  }
  // Step 3) the caps, as PyTorch sets them: 1 MiB for the first bucket only when the user
  // left bucket_cap_mb alone.
  ReducerOptions ro;
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  if (options_.bucket_cap_mb) {
    ro.bucket_cap_bytes = mib_to_bytes(*options_.bucket_cap_mb, "bucket_cap_mb");
    ro.first_bucket_cap_bytes = ro.bucket_cap_bytes;
  }
  // Step 4) the first buckets, from the registration order. Without find_unused_parameters
  // one bucket per dtype: the real order is not known yet, and the first backward records
  // it for the rebuild. With it, buckets by size, never rebuilt.
  const std::vector<std::size_t> limits =
      !options_.find_unused_parameters ? std::vector<std::size_t>{SIZE_MAX}
      : options_.bucket_cap_mb        ? std::vector<std::size_t>{ro.bucket_cap_bytes}
                                      : std::vector<std::size_t>{ro.first_bucket_cap_bytes,
                                                                 ro.bucket_cap_bytes};
  std::vector<std::vector<std::size_t>> buckets =
      specs.empty() ? std::vector<std::vector<std::size_t>>{}
                    : compute_bucket_assignment_by_size(specs, limits);
  // Backward produces the last layers' gradients first: launch their buckets first.
  std::reverse(buckets.begin(), buckets.end());
  reducer_ = std::make_unique<Reducer>(std::move(params), std::move(buckets), group_, ro);

  register_module("module", module_);
  train(module_->is_training());
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  timeline_ = StepTimeline{};
  timeline_.forward_begin = clock_s();
  if (is_training()) {
    // Step 1) once, after the first synchronized backward: buckets in the order the
    // gradients arrived (a collective; every rank does it in the same forward). Asked only
    // while a rebuild can still come, PyTorch's should_rebuild_buckets(): never with
    // find_unused_parameters, never again once done.
    const bool rebuild_due =
        !reducer_->options().find_unused_parameters && !reducer_->has_rebuilt_buckets();
    if (rebuild_due)
      timeline_.rebuilt_buckets = reducer_->rebuild_buckets();  // checks the prior reduction
    else
      reducer_->ensure_prior_reduction_finished();  // PyTorch checks on every such forward
    // Step 2) the hooks: armed only when this forward's backward will synchronize.
    if (require_grad_sync_) {
      reducer_->prepare_for_backward();
      timeline_.synchronized = true;
    }
  }
  // Step 3) rank 0's buffers (BatchNorm statistics) before the forward, as PyTorch does.
  if (options_.broadcast_buffers && group_.size() > 1) broadcast_buffers(*module_, group_, 0);
  Tensor y = module_->forward(x);
  timeline_.forward_end = clock_s();
  return y;
}

Tensor DistributedDataParallel::backward(const Tensor& grad_out) {
  timeline_.backward_begin = clock_s();
  // The hooks fire inside this call, launching buckets while backward goes on.
  Tensor grad_in = module_->backward(grad_out);
  timeline_.backward_end = clock_s();
  reducer_->finalize_backward();
  timeline_.reduce_end = clock_s();
  return grad_in;
}

std::shared_ptr<nn::Module> DistributedDataParallel::clone() const {
  MGPU_FAIL("DistributedDataParallel::clone: a DDP wrapper is tied to its process group and "
            "hooks; clone ddp.module() and wrap the copy in a new DistributedDataParallel");
}

std::string DistributedDataParallel::describe() const {
  std::ostringstream os;
  os << "DistributedDataParallel(world_size=" << group_.size() << ", backend="
     << group_.backend_name() << ", buckets=" << reducer_->num_buckets()
     << ", find_unused_parameters=" << (options_.find_unused_parameters ? "true" : "false")
     << ")";
  return os.str();
}

void DistributedDataParallel::sync_buffers() {
  if (group_.size() > 1) broadcast_buffers(*module_, group_, 0);
}

std::string DistributedDataParallel::bucket_summary() {
  std::ostringstream os;
  const auto& vars = reducer_->variables();
  for (std::size_t b = 0; b < reducer_->num_buckets(); ++b) {
    const auto& idx = reducer_->bucket_variables(b);
    char size[32];
    std::snprintf(size, sizeof size, "%.3f MiB", reducer_->bucket_bytes(b) / (1024.0 * 1024.0));
    os << "bucket " << b << ": " << size << ", " << idx.size() << " parameter(s):";
    for (std::size_t v : idx) os << " " << vars[v]->name();
    if (b + 1 < reducer_->num_buckets()) os << "\n";
  }
  return os.str();
}

}  // namespace mgpu::parallel
