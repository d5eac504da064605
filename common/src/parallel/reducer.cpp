// Reducer: buckets, grad-ready hooks, in-order launch, finalize. The two virtual methods are
// the reference of lesson 05's tasks 2 and 3.
#include "mgpu/parallel/reducer.h"

#include <chrono>
#include <sstream>

#include "mgpu/ops.h"

namespace mgpu::parallel {

double clock_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Reducer::Reducer(std::vector<nn::Parameter*> params,
                 std::vector<std::vector<std::size_t>> bucket_indices, dist::ProcessGroup& group,
                 ReducerOptions options)
    : params_(std::move(params)),
      world_size_(static_cast<double>(group.size())),
      group_(group),
      options_(options),
      comm_hook_(allreduce_hook) {
  const std::size_t n = params_.size();
  for (std::size_t v = 0; v < n; ++v) {
    MGPU_CHECK(params_[v] != nullptr, "Reducer: parameter ", v, " is null");
    MGPU_CHECK(params_[v]->requires_grad(), "Reducer: parameter '", params_[v]->name(),
               "' does not require grad; pass only trainable parameters");
    MGPU_CHECK(params_[v]->value.device() == params_[0]->value.device(), "Reducer: parameter '",
               params_[v]->name(), "' is ", params_[v]->value.str(), " but '", params_[0]->name(),
               "' is on ", params_[0]->value.device().str(),
               " (DDP needs the whole model on this rank's device: model.to(device) first)");
  }
  // Every parameter in exactly one bucket: checked, because the assignment may be a learner's.
  std::vector<int> seen(n, 0);
  locators_.resize(n);
  for (std::size_t b = 0; b < bucket_indices.size(); ++b) {
    MGPU_CHECK(!bucket_indices[b].empty(), "Reducer: bucket ", b, " of the assignment is empty");
    Bucket bucket;
    std::int64_t numel = 0;
    const DType dtype = params_.at(bucket_indices[b][0])->value.dtype();
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
      locators_[v] = Locator{b, slot};
    }
    bucket.buffer = Tensor::zeros({numel}, dtype, params_[bucket.variables[0]]->value.device());
    buckets_.push_back(std::move(bucket));
  }
  for (std::size_t v = 0; v < n; ++v)
    MGPU_CHECK(seen[v] == 1, "Reducer: parameter ", v, " ('", params_[v]->name(),
               "') is in no bucket of the assignment (every parameter needs exactly one)");
  variable_ready_.assign(n, 0);
  variable_used_.assign(n, 0);
  for (std::size_t v = 0; v < n; ++v)
    hook_handles_.push_back(
        params_[v]->add_grad_ready_hook([this, v](nn::Parameter&) { on_grad_ready(v); }));
  if (options_.record_timings) watcher_ = std::thread([this] { watch_loop(); });
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
  if (watcher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(timing_mutex_);
      watch_stop_ = true;
    }
    timing_cv_.notify_all();
    watcher_.join();
  }
}

void Reducer::register_comm_hook(CommHook hook) {
  MGPU_CHECK(static_cast<bool>(hook), "Reducer::register_comm_hook: the hook is empty");
  MGPU_CHECK(!expect_hooks_, "Reducer::register_comm_hook: register hooks before forward, "
             "not between forward and backward");
  comm_hook_ = std::move(hook);
}

void Reducer::prepare_for_backward() {
  if (!unfinished_.empty()) {
    std::ostringstream names;
    for (std::size_t i = 0; i < unfinished_.size(); ++i) names << (i ? ", " : "") << "'" << unfinished_[i] << "'";
    MGPU_FAIL("DistributedDataParallel: the previous backward did not finish reducing gradients. "
              "On rank ", group_.rank(), " parameter(s) ", names.str(),
              " got no gradient (they took no part in computing the loss), so their bucket and "
              "every bucket after it were never all-reduced. Fix: construct "
              "DistributedDataParallel with DDPOptions::find_unused_parameters = true (one extra "
              "small all-reduce per step), or freeze those parameters with "
              "set_requires_grad(false) before wrapping the model, or make them take part in "
              "the loss.");
  }
  if (expect_hooks_) {
    for (char r : variable_ready_)
      MGPU_CHECK(!r, "DistributedDataParallel: a backward fired the gradient hooks but did not "
                     "finish the reduction: call ddp.backward(grad), not ddp.module().backward(grad)");
  }
  variable_ready_.assign(params_.size(), 0);
  variable_used_.assign(params_.size(), 0);
  for (Bucket& b : buckets_) {
    b.pending = b.variables.size();
    b.future = CommFuture{};
  }
  next_bucket_ = 0;
  launch_order_.clear();
  {
    std::lock_guard<std::mutex> lock(timing_mutex_);
    timings_.clear();
    ++generation_;  // entries of an abandoned backward no longer write timings
  }
  expect_hooks_ = true;
}

void Reducer::on_grad_ready(std::size_t v) {
  if (!expect_hooks_) return;  // no_sync() or a backward without a synchronizing forward
  variable_used_[v] = 1;
  poll_in_flight();
  mark_variable_ready(v);
}

void Reducer::mark_variable_ready(std::size_t v) {
  if (!expect_hooks_) return;  // no_sync(): gradients only accumulate in param.grad
  MGPU_CHECK(!variable_ready_[v], "DistributedDataParallel: parameter '", params_[v]->name(),
             "' became ready twice in one backward (its module ran twice in forward?). DDP "
             "reduces each gradient once per backward; run the module once per forward");
  variable_ready_[v] = 1;
  // Step 1) the gradient, divided by the world size, goes into its slot of the bucket:
  // the all-reduce's sum of these is then the average over ranks.
  Tensor view = bucket_view(v);
  cast_(view, params_[v]->grad);
  scale_(view, 1.0 / world_size_);
  // Step 2) one fewer to wait for; a bucket with none left may launch...
  Bucket& bucket = buckets_[locators_[v].bucket];
  if (--bucket.pending > 0) return;
  // Step 3) ...but only in index order, so every rank issues the same collectives in the
  // same order: launch every ready bucket from next_bucket_ on, stop at the first unready.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    launch_bucket(next_bucket_++);
  }
}

void Reducer::finalize_backward() {
  if (!expect_hooks_) return;  // no_sync(): nothing to reduce
  // Step 1) unused parameters: with find_unused_parameters they count as ready now.
  if (options_.find_unused_parameters) {
    for (std::size_t v = 0; v < params_.size(); ++v)
      if (!variable_ready_[v]) mark_variable_ready(v);
  }
  if (next_bucket_ < buckets_.size()) {
    // Step 2) some bucket never filled up: leave the reduction unfinished (the next
    // forward reports which parameters got no gradient).
    record_unfinished_reduction();
  } else {
    // Step 3) wait for every bucket in order and copy the averages back into the grads;
    // a parameter no rank used keeps its gradient untouched.
    const std::vector<char> used = options_.find_unused_parameters
                                       ? sync_used_variables()
                                       : std::vector<char>(params_.size(), 1);
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      wait_bucket(b);
      for (std::size_t v : buckets_[b].variables)
        if (used[v]) cast_(params_[v]->grad, bucket_view(v));
    }
  }
  expect_hooks_ = false;
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
  std::size_t timing = 0;
  {
    std::lock_guard<std::mutex> lock(timing_mutex_);
    timing = timings_.size();
    timings_.push_back(BucketTiming{b, bucket.buffer.nbytes(), clock_s(), 0.0});
  }
  launch_order_.push_back(b);
  bucket.future = comm_hook_(group_, view);
  if (options_.record_timings) {
    {
      std::lock_guard<std::mutex> lock(timing_mutex_);
      watch_queue_.push_back(Watched{timing, generation_, bucket.future.work});
    }
    timing_cv_.notify_all();
  }
}

void Reducer::wait_bucket(std::size_t b) {
  MGPU_CHECK(b < buckets_.size(), "Reducer::wait_bucket: bucket ", b, " of ", buckets_.size());
  buckets_[b].future.wait();
  std::unique_lock<std::mutex> lock(timing_mutex_);
  for (BucketTiming& t : timings_) {
    if (t.bucket != b) continue;
    if (options_.record_timings) {
      timing_cv_.wait(lock, [&] { return t.done_s != 0; });  // the watcher's exact time
    } else if (t.done_s == 0) {
      t.done_s = clock_s();
    }
  }
}

void Reducer::poll_in_flight() {
  if (options_.record_timings) return;  // the watcher records exact times
  std::lock_guard<std::mutex> lock(timing_mutex_);
  for (BucketTiming& t : timings_)
    if (t.done_s == 0 && buckets_[t.bucket].future.is_completed()) t.done_s = clock_s();
}

std::vector<BucketTiming> Reducer::timings() const {
  std::lock_guard<std::mutex> lock(timing_mutex_);
  return timings_;
}

// record_timings: waits for each launched bucket's Work in launch order and stamps the
// moment it completed. (The Work may run a hook's finishing step later, on the caller.)
void Reducer::watch_loop() {
  std::unique_lock<std::mutex> lock(timing_mutex_);
  for (;;) {
    timing_cv_.wait(lock, [this] { return watch_stop_ || !watch_queue_.empty(); });
    if (watch_queue_.empty()) return;  // stopping, nothing left
    Watched w = std::move(watch_queue_.front());
    watch_queue_.pop_front();
    lock.unlock();
    try {
      w.work.wait();
    } catch (...) {  // the error reaches the caller through wait_bucket
    }
    const double done = clock_s();
    lock.lock();
    if (w.generation == generation_ && w.timing < timings_.size()) timings_[w.timing].done_s = done;
    timing_cv_.notify_all();
  }
}

void Reducer::record_unfinished_reduction() {
  unfinished_.clear();
  for (std::size_t v = 0; v < params_.size(); ++v)
    if (!variable_ready_[v]) unfinished_.push_back(params_[v]->name());
  for (std::size_t b = 0; b < next_bucket_; ++b) wait_bucket(b);
}

std::vector<char> Reducer::sync_used_variables() {
  if (params_.empty()) return {};
  std::vector<std::int32_t> flags(variable_used_.begin(), variable_used_.end());
  const Device device = params_.empty() ? Device::cpu() : params_[0]->value.device();
  Tensor t = Tensor::from_vector(flags, {static_cast<std::int64_t>(flags.size())}, device);
  group_.all_reduce(t, dist::ReduceOp::max).wait();
  const std::vector<std::int32_t> any = t.to_vector<std::int32_t>();
  return std::vector<char>(any.begin(), any.end());
}

}  // namespace mgpu::parallel
