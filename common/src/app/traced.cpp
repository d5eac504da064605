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

}  // namespace mgpu::app
