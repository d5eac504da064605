// The DataParallel wrapper: the four tasks put together into forward and backward.
// Read it after the tasks; every step is one call into them.
#include "data_parallel.h"

#include <chrono>

#include "mgpu/app/clock.h"
#include "mgpu/stream.h"

namespace mgpu::lesson02 {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Microseconds on the programs' one clock (app::now_s), so spans go into their trace as they are.
double now_us() { return app::now_s() * 1e6; }

std::string device_list(const std::vector<Device>& devices) {
  std::string s;
  for (const Device& d : devices) s += (s.empty() ? "" : ",") + d.str();
  return s;
}

}  // namespace

// ---- The interpreter-like lock (§6) ----------------------------------------------------------
InterpreterLock::InterpreterLock(double hold_us) : hold_us_(hold_us) {
  MGPU_CHECK(hold_us > 0, "InterpreterLock: hold_us must be positive, got ", hold_us);
}

void InterpreterLock::bookkeeping() {
  const Clock::time_point asked = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  waited_us_ += us_since(asked);
  ++acquisitions_;
  // Busy work, not a sleep: an interpreter running bytecode keeps its core busy.
  const Clock::time_point start = Clock::now();
  while (us_since(start) < hold_us_) {
  }
}

Tensor InterpreterLock::forward(nn::Module& m, const Tensor& x) {
  bookkeeping();  // m's own __call__ and the Python lines of its forward
  auto* layers = dynamic_cast<nn::Sequential*>(&m);
  if (layers == nullptr) return m.forward(x);  // a leaf: its op runs without the lock
  // Sequential::forward is exactly this loop, so the result is the same bits.
  Tensor h = x;
  for (std::size_t i = 0; i < layers->size(); ++i) h = forward((*layers)[i], h);
  return h;
}

std::int64_t InterpreterLock::acquisitions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return acquisitions_;
}

double InterpreterLock::waited_us() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waited_us_;
}

// ---- DataParallel ---------------------------------------------------------------------------

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices)
    : module_(std::move(module)), devices_(std::move(devices)) {
  MGPU_CHECK(module_ != nullptr, "DataParallel: the module is null");
  MGPU_CHECK(!devices_.empty(), "DataParallel: no devices given; pass e.g. cpu:0,cpu:1");
  for (std::size_t i = 0; i < devices_.size(); ++i)
    for (std::size_t j = i + 1; j < devices_.size(); ++j)
      MGPU_CHECK(devices_[i] != devices_[j], "DataParallel: ", devices_[i].str(),
                 " is listed twice in ", device_list(devices_),
                 "; each replica needs its own logical device (cuda:0,cuda:1 share one GPU "
                 "if you have only one)");
  // A common pitfall: wrapping a model that does not live on the first device yet.
  const Device& home = devices_[0];
  const std::string fix = "; move the model first, model->to(" + home.str() +
                          "), then wrap it (PyTorch: model.to('cuda:0') before "
                          "nn.DataParallel(model))";
  for (auto& [name, p] : module_->named_parameters())
    MGPU_CHECK(p->value.device() == home, "DataParallel: the module must live on devices[0] = ",
               home.str(), " when it is wrapped, but parameter '", name, "' is ", p->value.str(),
               fix);
  for (auto& [name, b] : module_->named_buffers())
    MGPU_CHECK(b->device() == home, "DataParallel: the module must live on devices[0] = ",
               home.str(), " when it is wrapped, but buffer '", name, "' is ", b->str(), fix);
  MGPU_CHECK(module_->device() == home, "DataParallel: the module reports device ",
             module_->device().str(), " but devices[0] is ", home.str(), fix);
  replicas_ = replicate(module_, devices_);
}

void DataParallel::add_span(const std::string& name, int track, double start_us, double end_us) {
  if (!record_spans_) return;
  std::lock_guard<std::mutex> lock(spans_mutex_);
  spans_.push_back({name, track, start_us, end_us});
}

std::vector<Span> DataParallel::take_spans() {
  std::lock_guard<std::mutex> lock(spans_mutex_);
  std::vector<Span> out;
  out.swap(spans_);
  return out;
}

// Wall time of a phase: the work is finished when it returns (parallel_apply waits for
// every device, copies are synchronous), so the host clock measures the devices too.
void DataParallel::phase_done(const std::string& phase, double& start_us) {
  const double end = now_us();
  times_.add(phase, (end - start_us) / 1000.0);
  add_span(phase, 0, start_us, end);
  start_us = end;
}

std::vector<Tensor> DataParallel::run_replicas(std::size_t n, const char* name,
                                               const std::function<Tensor(std::size_t)>& fn) {
  const std::vector<Device> used(devices_.begin(), devices_.begin() + n);
  try {
    return parallel_apply(used, [&](std::size_t i) {
      const double start = now_us();
      Tensor out = fn(i);
      add_span(name, static_cast<int>(i) + 1, start, now_us());
      return out;
    });
  } catch (...) {
    // Some replicas may hold saved contexts for a backward that will never come.
    for (std::size_t i = 0; i < n; ++i) replicas_[i]->clear_saved();
    pending_.clear();
    throw;
  }
}

void DataParallel::serialize_python_like(double hold_us) {
  MGPU_CHECK(hold_us >= 0 && hold_us <= 1e6, "DataParallel::serialize_python_like: hold_us is ",
             hold_us, "; give the microseconds of bookkeeping per module call, 0 to turn it off");
  interpreter_lock_ = hold_us > 0 ? std::make_unique<InterpreterLock>(hold_us) : nullptr;
}

void DataParallel::train(bool on) {
  for (auto& r : replicas_) r->train(on);
  module_->train(on);
}

Tensor DataParallel::forward(const Tensor& x) {
  check_defined("DataParallel::forward", x, "x");
  MGPU_CHECK(x.ndim() >= 1 && x.size(0) >= 1, "DataParallel::forward: the input is ", x.str(),
             "; it needs a batch dimension (dimension 0) with at least one row. The batch size "
             "is the total batch: DataParallel splits it across its ",
             devices_.size(), " devices (", device_list(devices_), ")");
  double t = now_us();
  // Step 1) split the batch: chunk i goes to devices[i]. A small batch uses fewer devices.
  const std::vector<Tensor> chunks = scatter(x, devices_, &traffic_, Phase::scatter);
  const std::size_t active = chunks.size();
  const std::vector<std::shared_ptr<nn::Module>> running(replicas_.begin(),
                                                         replicas_.begin() + active);
  phase_done("scatter", t);

  // Step 2) the optimizer changed the weights on device 0: send them to every replica.
  broadcast_parameters(*module_, running, &traffic_);
  phase_done("broadcast", t);

  // Step 3) every replica runs its chunk, all at once.
  // With the interpreter-like lock on, the threads take turns for each module call (§6).
  const std::vector<Tensor> outputs = run_replicas(active, "forward", [&](std::size_t i) {
    return interpreter_lock_ ? interpreter_lock_->forward(*running[i], chunks[i])
                             : running[i]->forward(chunks[i]);
  });
  phase_done("forward", t);

  // Step 4) the outputs come back to device 0, where the loss is computed.
  Tensor out = gather(outputs, devices_[0], &traffic_, Phase::gather);
  phase_done("gather", t);

  last_chunks_.clear();
  for (const Tensor& c : chunks) last_chunks_.push_back(c.size(0));
  if (module_->is_training()) pending_.push_back({last_chunks_, out.shape(), outputs[0].ndim() == 0});
  return out;
}

Tensor DataParallel::backward(const Tensor& grad_out, bool input_grad) {
  check_defined("DataParallel::backward", grad_out, "grad_out");
  MGPU_CHECK(!pending_.empty(), "DataParallel::backward: no training forward is waiting for "
             "its backward (a forward in eval mode keeps nothing; call train() first)");
  const Pending step = pending_.back();
  pending_.pop_back();
  MGPU_CHECK(grad_out.shape() == step.output_shape, "DataParallel::backward: grad_out is ",
             grad_out.str(), " but the forward's gathered output had shape ",
             shape_str(step.output_shape));
  double t = now_us();
  // Step 1) split d(loss)/d(output) exactly like the batch (the backward of gather).
  std::vector<Tensor> grads = scatter(grad_out, devices_, &traffic_, Phase::grad_scatter);
  if (step.scalar_outputs)  // replica i returned a scalar: its gradient is element i, 0-d
    for (Tensor& g : grads) g = g.reshape({});
  MGPU_CHECK(grads.size() == step.chunks.size(), "DataParallel::backward: internal error: ",
             grads.size(), " gradient chunks for ", step.chunks.size(), " replicas");
  const std::size_t active = grads.size();
  const std::vector<std::shared_ptr<nn::Module>> running(replicas_.begin(),
                                                         replicas_.begin() + active);
  phase_done("grad_scatter", t);

  // Step 2) each replica's gradient must hold this backward only (the module's own
  // gradients accumulate as usual: zero_grad() is the training loop's job).
  for (std::size_t i = 1; i < active; ++i) running[i]->zero_grad();
  const std::vector<Tensor> grad_inputs =
      run_replicas(active, "backward", [&](std::size_t i) { return running[i]->backward(grads[i]); });
  phase_done("backward", t);

  // Step 3) sum every replica's gradients onto the module on device 0.
  reduce_add_gradients(*module_, running, &traffic_);
  Stream::current(devices_[0]).synchronize();  // the adds are queued on device 0
  phase_done("reduce", t);

  if (!input_grad) return Tensor();
  return gather(grad_inputs, devices_[0], &traffic_, Phase::gather);
}

}  // namespace mgpu::lesson02
