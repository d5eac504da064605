// TracedModule and TracedOptimizer: calls recorded as trace spans (see traced.h).
#include "mgpu/app/traced.h"

#include <utility>

#include "mgpu/app/clock.h"
#include "mgpu/stream.h"

namespace mgpu::app {

namespace {

// On a GPU the host only queues kernels: wait for them so the span covers their work.
double traced_now(const Trace& trace, const Device& device) {
  if (trace.on() && device.is_cuda()) synchronize(device);
  return now_s();
}

}  // namespace

TracedModule::TracedModule(nn::Module& inner, Trace& trace, Device device, std::string track)
    : inner_(inner), trace_(trace), device_(device), track_(std::move(track)) {}

Tensor TracedModule::forward(const Tensor& x) {
  const double begin = traced_now(trace_, device_);
  Tensor y = inner_.forward(x);
  trace_.span(track_, "forward", begin, traced_now(trace_, device_));
  return y;
}

Tensor TracedModule::backward(const Tensor& grad_out) {
  const double begin = traced_now(trace_, device_);
  Tensor g = inner_.backward(grad_out);
  trace_.span(track_, "backward", begin, traced_now(trace_, device_));
  return g;
}

TracedOptimizer::TracedOptimizer(optim::Optimizer& inner, Trace& trace, Device device,
                                 std::string track)
    : Optimizer(inner.params(), inner.lr()),
      inner_(inner),
      trace_(trace),
      device_(device),
      track_(std::move(track)) {}

void TracedOptimizer::step() {
  const double begin = traced_now(trace_, device_);
  inner_.step();
  trace_.span(track_, "optimizer", begin, traced_now(trace_, device_));
}

DdpStepTrace::DdpStepTrace(Trace& trace, parallel::DistributedDataParallel& ddp, bool time_buckets)
    : trace_(trace), ddp_(ddp), timed_(trace.on() || time_buckets) {
  if (timed_) ddp_.reducer().set_comm_log(&timer_);
}

DdpStepTrace::~DdpStepTrace() {
  if (timed_) ddp_.reducer().set_comm_log(nullptr);
}

std::vector<parallel::CommRecord> DdpStepTrace::record() { return record(ddp_.last_step()); }

std::vector<parallel::CommRecord> DdpStepTrace::record(const parallel::StepTimeline& t) {
  std::vector<parallel::CommRecord> buckets;
  if (timed_) buckets = timer_.take();
  if (!trace_.on()) return buckets;
  // The step that rebuilt the buckets says so: its all-reduces run in the new order.
  trace_.span("compute", t.rebuilt_buckets ? "forward (buckets rebuilt)" : "forward",
              t.forward_begin, t.forward_end);
  trace_.span("compute", "backward", t.backward_begin, t.backward_end);
  trace_.span("compute", "wait for buckets", t.backward_end, t.reduce_end);
  const parallel::Reducer& reducer = ddp_.reducer();
  for (const parallel::CommRecord& b : buckets) {
    const std::vector<std::size_t>& vars = reducer.bucket_variables(b.index);
    std::string name = "all-reduce bucket " + std::to_string(b.index) + ":";
    for (std::size_t i = 0; i < vars.size() && i < 3; ++i)
      name += " " + reducer.variables()[vars[i]]->name();
    if (vars.size() > 3) name += " +" + std::to_string(vars.size() - 3);
    trace_.span("comm", name, b.launch_s, b.done_s,
                {{"bytes", static_cast<double>(b.bytes)},
                 {"parameters", static_cast<double>(vars.size())}});
  }
  return buckets;
}

}  // namespace mgpu::app
