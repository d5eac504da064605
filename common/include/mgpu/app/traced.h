/// @file traced.h
/// @brief A Module and an Optimizer that record their calls as trace spans, and the phases
/// of DDP steps.
///
/// Wrap a model and its optimizer, hand the wrappers to code that takes an ordinary Module
/// and Optimizer (a lesson's training step), and the trace shows forward, backward and the
/// optimizer step inside it without that code knowing. While the trace is off the wrappers
/// only forward the calls. A DDP program adds a DdpStepTrace: DDP's forward, backward, the
/// wait for the last buckets and each bucket's all-reduce (DESIGN.md §8).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mgpu/app/trace.h"
#include "mgpu/device.h"
#include "mgpu/nn/module.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/parallel/comm_log.h"
#include "mgpu/parallel/ddp/ddp.h"

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

/// Records each DDP step on a Trace: "forward" ("forward (buckets rebuilt)" on the step
/// whose forward rebuilt the buckets), "backward" and "wait for buckets" (from backward's
/// end to the averaged gradients) on the compute track, and each bucket's all-reduce on the
/// comm track, named by its first parameters ("all-reduce bucket 0: module.5.weight
/// module.5.bias module.3.weight +3"), with its bytes. The optimizer's span comes from a
/// TracedOptimizer.
///
///     app::DdpStepTrace ddp_trace(run.trace(), ddp);
///     ... ddp.forward(x); ddp.backward(g); traced_optimizer.step();
///     ddp_trace.record();
class DdpStepTrace {
 public:
  /// Times `ddp`'s bucket all-reduces (a CommLog on its reducer) while `trace` is on, or
  /// always with `time_buckets` (a program that uses the timings itself). Both must
  /// outlive this object.
  DdpStepTrace(Trace& trace, parallel::DistributedDataParallel& ddp, bool time_buckets = false);
  /// Takes the CommLog off the reducer.
  ~DdpStepTrace();
  DdpStepTrace(const DdpStepTrace&) = delete;
  DdpStepTrace& operator=(const DdpStepTrace&) = delete;

  /// After a step: records its phases as DDP timed them (ddp.last_step()) and the buckets
  /// launched since the last call. Returns those buckets' timings (empty when not timed).
  std::vector<parallel::CommRecord> record();
  /// As record(), with phases the program timed itself (lesson 09 marks them on its clock).
  std::vector<parallel::CommRecord> record(const parallel::StepTimeline& phases);

 private:
  Trace& trace_;
  parallel::DistributedDataParallel& ddp_;
  parallel::CommLog timer_;
  bool timed_ = false;
};

}  // namespace mgpu::app
