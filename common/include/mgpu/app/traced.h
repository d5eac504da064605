/// @file traced.h
/// @brief A Module and an Optimizer that record their calls as trace spans.
///
/// Wrap a model and its optimizer, hand the wrappers to code that takes an ordinary Module
/// and Optimizer (a lesson's training step), and the trace shows forward, backward and the
/// optimizer step inside it without that code knowing. While the trace is off the wrappers
/// only forward the calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mgpu/app/trace.h"
#include "mgpu/device.h"
#include "mgpu/nn/module.h"
#include "mgpu/optim/optimizer.h"

namespace mgpu::app {

/// Runs `inner` and records each forward and backward as a span on `track`. On a CUDA
/// device it waits for the device at both ends of a span (only while the trace is on), so
/// that a span covers its kernels and not just their launch.
class TracedModule : public nn::Module {
 public:
  /// `inner` must outlive the wrapper.
  TracedModule(nn::Module& inner, Trace& trace, Device device, std::string track = "compute");
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<nn::Module> clone() const override { return inner_.clone(); }
  std::string describe() const override { return inner_.describe(); }

 private:
  nn::Module& inner_;
  Trace& trace_;
  Device device_;
  std::string track_;
};

/// Runs `inner`'s step() and records it as an "optimizer" span (see TracedModule). The
/// learning rate is inner's: set it there.
class TracedOptimizer : public optim::Optimizer {
 public:
  /// `inner` must outlive the wrapper.
  TracedOptimizer(optim::Optimizer& inner, Trace& trace, Device device,
                  std::string track = "compute");
  void step() override;
  std::string describe() const override { return inner_.describe(); }

 protected:
  std::vector<std::string> state_keys() const override { return {}; }

 private:
  optim::Optimizer& inner_;
  Trace& trace_;
  Device device_;
  std::string track_;
};

}  // namespace mgpu::app
