// Reducer: buckets, grad-ready hooks, launch and wait, the cross-rank helpers. Lesson 05
// writes the three methods that make the algorithm, one file each: mark_variable_ready
// (lessons/05_ddp/reducer_mark_ready.cpp), finalize_backward (reducer_finalize.cpp) and
// rebuild_buckets (reducer_rebuild.cpp); the references are their twins in solutions/05_ddp/.
#include "mgpu/parallel/ddp/reducer.h"

#include <sstream>

#include "mgpu/ops.h"

namespace mgpu::parallel {

Reducer::Reducer(std::vector<nn::Parameter*> params,
                 std::vector<std::vector<std::size_t>> bucket_indices, dist::ProcessGroup& group,
                 ReducerOptions options)
    : params_(std::move(params)),
      world_size_(static_cast<double>(group.size())),
      group_(group),
      options_(options) {
  for (std::size_t v = 0; v < params_.size(); ++v) {
    MGPU_CHECK(params_[v] != nullptr, "Reducer: parameter ", v, " is null");
    MGPU_CHECK(params_[v]->requires_grad(), "Reducer: parameter '", params_[v]->name(),
               "' does not require grad; pass only trainable parameters");
    MGPU_CHECK(params_[v]->value.device() == params_[0]->value.device(), "Reducer: parameter '",
               params_[v]->name(), "' is ", params_[v]->value.str(), " but '", params_[0]->name(),
               "' is on ", params_[0]->value.device().str(),
               " (DDP needs the whole model on this rank's device: model.to(device) first)");
  }
  initialize_buckets(std::move(bucket_indices));
  variable_ready_.assign(params_.size(), 0);
  variable_used_.assign(params_.size(), 0);
  for (std::size_t v = 0; v < params_.size(); ++v)
    hook_handles_.push_back(
        params_[v]->add_grad_ready_hook([this, v](nn::Parameter&) { on_grad_ready(v); }));
}

Reducer::~Reducer() {
  for (std::size_t v = 0; v < params_.size(); ++v) params_[v]->remove_grad_ready_hook(hook_handles_[v]);
  // Communication still in flight uses the buffers; the Work keeps them alive, but wait
  // anyway so that no op outlives the reducer that issued it.
  for (std::size_t b = 0; b < next_bucket_ && b < buckets_.size(); ++b) {
    try {
      buckets_[b].future.work.wait();
    } catch (...) {  // a destructor must not throw; the error was reported by the waiter
    }
  }
}

void Reducer::register_comm_hook(CommHook hook) {
  MGPU_CHECK(static_cast<bool>(hook), "register_comm_hook: the hook is empty");
  MGPU_CHECK(!comm_hook_, "register_comm_hook may be called only once (as in PyTorch); to "
             "combine hooks, register one hook that calls the others");
  MGPU_CHECK(!expect_hooks_, "register_comm_hook: register the hook before forward, not "
             "between forward and backward");
  comm_hook_ = std::move(hook);
}

void Reducer::prepare_for_backward() {
  ensure_prior_reduction_finished();
  if (expect_hooks_) {
    for (char r : variable_ready_)
      MGPU_CHECK(!r, "DistributedDataParallel: a backward fired the gradient hooks but did not "
                     "finish the reduction: call ddp.backward(grad), not ddp.module().backward(grad)");
  }
  variable_ready_.assign(params_.size(), 0);
  for (Bucket& b : buckets_) {
    b.pending = b.variables.size();
    b.future = CommFuture{};
  }
  next_bucket_ = 0;
  launch_order_.clear();
  grad_ready_order_.clear();  // a recorded order the rebuild did not use is stale now
  expect_hooks_ = true;
}

void Reducer::on_grad_ready(std::size_t v) {
  // Used is noted even under no_sync(): a parameter used by any micro-batch of an
  // accumulation counts as used when the accumulated gradient is reduced (as in PyTorch).
  variable_used_[v] = 1;
  if (!expect_hooks_) return;  // no_sync(), or a backward without a synchronizing forward
  // The order gradients really arrive in: the rebuild regroups the buckets by it.
  if (!options_.find_unused_parameters && !has_rebuilt_buckets_) grad_ready_order_.push_back(v);
  MGPU_CHECK(!variable_ready_[v], "DistributedDataParallel: Expected to mark a variable ready "
             "only once: parameter '", params_[v]->name(), "' became ready twice in one backward (its module ran twice in forward?). DDP "
             "reduces each gradient once per backward; run the module once per forward");
  mark_variable_ready(v);
}

// ---- helpers ------------------------------------------------------------------------------

const std::vector<std::size_t>& Reducer::bucket_variables(std::size_t b) const {
  MGPU_CHECK(b < buckets_.size(), "Reducer::bucket_variables: bucket ", b, " of ", buckets_.size());
  return buckets_[b].variables;
}

std::size_t Reducer::bucket_bytes(std::size_t b) const {
  MGPU_CHECK(b < buckets_.size(), "Reducer::bucket_bytes: bucket ", b, " of ", buckets_.size());
  return buckets_[b].buffer.nbytes();
}

const Tensor& Reducer::bucket_buffer(std::size_t b) const {
  MGPU_CHECK(b < buckets_.size(), "Reducer::bucket_buffer: bucket ", b, " of ", buckets_.size());
  return buckets_[b].buffer;
}

Tensor Reducer::bucket_view(std::size_t v) const {
  MGPU_CHECK(v < params_.size(), "Reducer::bucket_view: parameter ", v, " of ", params_.size());
  const Locator& at = locators_[v];
  return buckets_[at.bucket].buffer.view(buckets_[at.bucket].offsets[at.slot],
                                         params_[v]->value.shape());
}

void Reducer::launch_bucket(std::size_t b) {
  MGPU_CHECK(b < buckets_.size(), "Reducer::launch_bucket: bucket ", b, " of ", buckets_.size());
  Bucket& bucket = buckets_[b];
  GradBucket view;
  view.index = b;
  view.buffer = bucket.buffer;
  view.is_last = b + 1 == buckets_.size();
  for (std::size_t v : bucket.variables) view.parameter_names.push_back(params_[v]->name());
  launch_order_.push_back(b);
  // Without a registered hook: a plain sum (the gradients were divided on the way in).
  static const CommHook sum = [](dist::ProcessGroup& g, GradBucket& gb) {
    return CommFuture{g.all_reduce(gb.buffer, dist::ReduceOp::sum), nullptr};
  };
  const CommHook& hook = comm_hook_ ? comm_hook_ : sum;
  const double launch_s = comm_log_ ? clock_s() : 0.0;
  bucket.future = hook(group_, view);
  if (comm_log_)
    comm_log_->record(b, "all-reduce", view.buffer.nbytes(), bucket.future.work, launch_s);
}

void Reducer::wait_bucket(std::size_t b) {
  MGPU_CHECK(b < buckets_.size(), "Reducer::wait_bucket: bucket ", b, " of ", buckets_.size());
  buckets_[b].future.wait();
}

void Reducer::record_unfinished_reduction() {
  unfinished_.clear();
  for (std::size_t v = 0; v < params_.size(); ++v)
    if (!variable_ready_[v]) unfinished_.push_back(params_[v]->name());
  for (std::size_t b = 0; b < next_bucket_; ++b) wait_bucket(b);
}

void Reducer::ensure_prior_reduction_finished() const {
  if (unfinished_.empty()) return;
  std::ostringstream names, indices;
  for (std::size_t i = 0; i < unfinished_.size(); ++i) names << (i ? ", " : "") << "'" << unfinished_[i] << "'";
  for (std::size_t v = 0, n = 0; v < params_.size(); ++v)  // PyTorch's list: variable indices
    for (const std::string& name : unfinished_)
      if (params_[v]->name() == name) indices << (n++ ? " " : "") << v;
  // PyTorch's own words first, so that a search for the message finds its answers too.
  MGPU_FAIL("DistributedDataParallel: Expected to have finished reduction in the prior "
            "iteration before starting a new one. Parameter indices which did not receive grad "
            "for rank ", group_.rank(), ": ", indices.str(), ". The previous backward did not "
            "finish reducing gradients: on rank ", group_.rank(), " parameter(s) ", names.str(),
            " got no gradient (they took no part in computing the loss), so their bucket and "
            "every bucket after it were never all-reduced. Fix: construct "
            "DistributedDataParallel with DDPOptions::find_unused_parameters = true (one extra "
            "small all-reduce per step), or freeze those parameters with "
            "set_requires_grad(false) before wrapping the model, or make them take part in "
            "the loss.");
}

std::vector<char> Reducer::sync_used_variables() {
  if (params_.empty()) return {};
  std::vector<std::int32_t> flags(variable_used_.begin(), variable_used_.end());
  Tensor t = Tensor::from_vector(flags, {static_cast<std::int64_t>(flags.size())},
                                 params_[0]->value.device());
  group_.all_reduce(t, dist::ReduceOp::max).wait();
  const std::vector<std::int32_t> any = t.to_vector<std::int32_t>();
  variable_used_.assign(params_.size(), 0);  // counted afresh until the next finalize
  return std::vector<char>(any.begin(), any.end());
}

GradSpec Reducer::grad_spec(std::size_t v) const {
  MGPU_CHECK(v < params_.size(), "Reducer::grad_spec: parameter ", v, " of ", params_.size());
  return GradSpec{params_[v]->value.nbytes(), params_[v]->value.dtype()};
}

void Reducer::sync_bucket_indices(std::vector<std::vector<std::size_t>>& bucket_indices) {
  // One message: [number of buckets, size of each bucket..., the indices...], padded to
  // the same length on every rank (every rank holds each parameter exactly once).
  const std::size_t n = params_.size();
  std::vector<std::int64_t> flat(1 + 2 * n, 0);
  flat[0] = static_cast<std::int64_t>(bucket_indices.size());
  std::size_t pos = 1 + n;
  for (std::size_t b = 0; b < bucket_indices.size() && b < n; ++b) {
    flat[1 + b] = static_cast<std::int64_t>(bucket_indices[b].size());
    for (std::size_t v : bucket_indices[b])
      if (pos < flat.size()) flat[pos++] = static_cast<std::int64_t>(v);
  }
  Tensor t = Tensor::from_vector(flat, {static_cast<std::int64_t>(flat.size())}, group_.device());
  group_.broadcast(t, 0).wait();
  flat = t.to_vector<std::int64_t>();
  bucket_indices.assign(static_cast<std::size_t>(flat[0]), {});
  pos = 1 + n;
  for (std::size_t b = 0; b < bucket_indices.size(); ++b)
    for (std::int64_t k = 0; k < flat[1 + b]; ++k)
      bucket_indices[b].push_back(static_cast<std::size_t>(flat[pos++]));
}

std::vector<std::vector<std::size_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<std::size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.variables);
  return out;
}

void Reducer::adopt_rebuilt_buckets(std::vector<std::vector<std::size_t>> bucket_indices) {
  initialize_buckets(std::move(bucket_indices));  // checks that it is a valid assignment
  grad_ready_order_.clear();
  rebuilt_from_order_.clear();
  has_rebuilt_buckets_ = true;
}

void Reducer::adopt_ready_order(std::vector<std::size_t> order) {
  MGPU_CHECK(!has_rebuilt_buckets_ && !options_.find_unused_parameters,
             "Reducer: a ready order is only taken before the rebuild, without "
             "find_unused_parameters");
  std::vector<char> seen(params_.size(), 0);
  for (std::size_t v : order)
    MGPU_CHECK(v < params_.size() && !seen[v]++, "Reducer: the ready order names variable ", v,
               " twice or out of range (", params_.size(), " variables)");
  MGPU_CHECK(order.size() == params_.size(), "Reducer: the ready order has ", order.size(),
             " of the ", params_.size(), " variables");
  grad_ready_order_ = std::move(order);
}

void Reducer::initialize_buckets(std::vector<std::vector<std::size_t>> bucket_indices) {
  MGPU_CHECK(!expect_hooks_, "Reducer: buckets cannot change while a backward is in flight");
  const std::size_t n = params_.size();
  // Every parameter in exactly one bucket: checked, because the assignment may be a learner's.
  std::vector<int> seen(n, 0);
  std::vector<Bucket> buckets;
  std::vector<Locator> locators(n);
  for (std::size_t b = 0; b < bucket_indices.size(); ++b) {
    MGPU_CHECK(!bucket_indices[b].empty(), "Reducer: bucket ", b, " of the assignment is empty");
    Bucket bucket;
    std::int64_t numel = 0;
    const std::size_t first = bucket_indices[b][0];
    MGPU_CHECK(first < n, "Reducer: bucket ", b, " names parameter ", first, " but there are only ", n);
    const DType dtype = params_[first]->value.dtype();
    for (std::size_t slot = 0; slot < bucket_indices[b].size(); ++slot) {
      const std::size_t v = bucket_indices[b][slot];
      MGPU_CHECK(v < n, "Reducer: bucket ", b, " names parameter ", v, " but there are only ", n);
      MGPU_CHECK(++seen[v] == 1, "Reducer: parameter ", v, " ('", params_[v]->name(),
                 "') is in more than one bucket of the assignment");
      MGPU_CHECK(params_[v]->value.dtype() == dtype, "Reducer: bucket ", b, " mixes dtypes: '",
                 params_[v]->name(), "' is ", params_[v]->value.str(), " but the bucket is ",
                 dtype_name(dtype), " (one dtype per bucket)");
      bucket.variables.push_back(v);
      bucket.offsets.push_back(numel);
      numel += params_[v]->value.numel();
      locators[v] = Locator{b, slot};
    }
    bucket.buffer = Tensor::zeros({numel}, dtype, params_[first]->value.device());
    buckets.push_back(std::move(bucket));
  }
  for (std::size_t v = 0; v < n; ++v)
    MGPU_CHECK(seen[v] == 1, "Reducer: parameter ", v, " ('", params_[v]->name(),
               "') is in no bucket of the assignment (every parameter needs exactly one)");
  buckets_ = std::move(buckets);  // the old buffers go once no grad points into them
  locators_ = std::move(locators);
  next_bucket_ = 0;
  // gradient_as_bucket_view: each grad moves into its slot and from now on is that slot,
  // so the separate gradient tensors are freed (PyTorch's initialize_bucket_views).
  if (options_.gradient_as_bucket_view) {
    for (std::size_t v = 0; v < n; ++v) {
      Tensor view = bucket_view(v);
      cast_(view, params_[v]->grad);
      params_[v]->grad = view;
    }
  }
}

}  // namespace mgpu::parallel
