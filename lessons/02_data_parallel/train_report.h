/// @file train_report.h
/// @brief What lesson 02's program prints around its training loop: the setup, the trace
/// rows of the phases and replicas, and the closing report (time per phase, peak memory,
/// bytes moved, the BatchNorm check). Program-only: the tests do not use it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "data_parallel.h"
#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/nn/models.h"
#include "mgpu/optim/optimizer.h"
#include "traffic.h"

namespace mgpu::lesson02 {

/// The model line and how the batch splits across the devices.
inline void print_setup(const app::Options& opt, nn::Module& model, const optim::Optimizer& optimizer,
                        const std::vector<Device>& devices) {
  const int k = static_cast<int>(devices.size());
  const std::vector<std::int64_t> chunks = chunk_sizes(opt.batch_size, k);
  std::string split;
  for (std::size_t i = 0; i < chunks.size(); ++i)
    split += (i ? " + " : "") + std::to_string(chunks[i]) + " on " + devices[i].str();
  std::printf("%s; %s\n", app::model_line(opt.model, model.num_parameters()).c_str(),
              optimizer.describe().c_str());
  std::printf("batch: %lld in total (global batch %lld) = %s\n",
              static_cast<long long>(opt.batch_size), static_cast<long long>(opt.batch_size),
              split.c_str());
  if (static_cast<int>(chunks.size()) < k)
    std::printf("note: a batch of %lld on %d devices makes only %zu chunks; %d device(s) idle\n",
                static_cast<long long>(opt.batch_size), k, chunks.size(),
                k - static_cast<int>(chunks.size()));
}

/// The trace's rows: the main thread's phases, then one row per replica's thread.
class TraceRows {
 public:
  TraceRows(app::Trace& trace, const std::vector<Device>& devices) : trace_(trace) {
    tracks_.push_back("main thread");
    for (std::size_t i = 0; i < devices.size(); ++i)
      tracks_.push_back("replica " + std::to_string(i) + " on " + devices[i].str());
    trace_.name_process("DataParallel (lesson 02)");
    trace_.declare_tracks(tracks_);
  }
  /// A phase of the main thread from `begin_s` to now: into dp's times and the trace.
  void phase(DataParallel& dp, const char* name, double begin_s) {
    const double end_s = app::now_s();
    dp.times().add(name, (end_s - begin_s) * 1e3);
    trace_.span(tracks_[0], name, begin_s, end_s);
  }
  /// DataParallel's own spans (steady-clock microseconds, as app::now_s()).
  void add(const std::vector<Span>& spans) {
    for (const Span& s : spans)
      trace_.span(tracks_.at(static_cast<std::size_t>(s.track)), s.name, s.start_us * 1e-6,
                  s.end_us * 1e-6);
  }

 private:
  app::Trace& trace_;
  std::vector<std::string> tracks_;
};

/// The bytes of one whole training step (the second: the first allocates).
struct StepTraffic {
  std::string report;
  std::size_t bytes = 0, bytes_device0 = 0;
  void keep(const Traffic& t, const std::vector<Device>& devices) {
    report = t.report(devices);
    bytes = t.total();
    bytes_device0 = t.bytes_through(devices[0]);
  }
};

/// Where the time, the memory and the bytes went.
inline void print_report(DataParallel& dp, const std::vector<Device>& devices, std::int64_t steps,
                         const StepTraffic& traffic) {
  std::printf("time per training step by phase (ms, averaged over %lld steps):\n ",
              static_cast<long long>(steps));
  for (const char* p : {"data", "scatter", "broadcast", "forward", "gather", "loss",
                        "grad_scatter", "backward", "reduce", "optimizer"})
    std::printf(" %s %.2f", p, dp.times().ms[p] / static_cast<double>(std::max<std::int64_t>(1, steps)));
  if (const InterpreterLock* lock = dp.interpreter_lock())
    std::printf("\ninterpreter-like lock (--serialize-python-like): %lld module calls took it "
                "(training and evaluation), %.1f us of busy work each; threads waited %.1f ms "
                "in all for it",
                static_cast<long long>(lock->acquisitions()), lock->hold_us(),
                lock->waited_us() / 1000.0);
  std::printf("\npeak memory per device (after the first step):");
  for (const Device& d : devices)
    std::printf("  %s %s", d.str().c_str(), format_bytes(memory_stats(d).peak_allocated).c_str());
  std::printf("\n");
  if (traffic.bytes > 0)
    std::printf("bytes moved in one training step (%s in all, %.0f%% of them to or from %s):\n%s\n",
                format_bytes(traffic.bytes).c_str(),
                100.0 * static_cast<double>(traffic.bytes_device0) / static_cast<double>(traffic.bytes),
                devices[0].str().c_str(), traffic.report.c_str());
}

/// A common pitfall of DataParallel, measured: BatchNorm's running statistics are updated
/// on device 0's replica, whose forward saw only device 0's chunk. One more training forward
/// through DataParallel moves the running mean exactly as that chunk alone would.
inline void batchnorm_check(nn::Module& model, const std::vector<Device>& devices, const Tensor& x) {
  std::string bn_name;
  for (auto& [name, b] : model.named_buffers())
    if (name.size() > 12 && name.compare(name.size() - 12, 12, "running_mean") == 0) {
      bn_name = name;
      break;
    }
  if (bn_name.empty() || devices.size() < 2) return;
  auto probe = model.clone();  // on devices[0], same weights and statistics
  auto chunk0 = model.clone();
  auto full = model.clone();
  probe->train();
  chunk0->train();
  full->train();
  DataParallel dp(probe, devices);
  dp.forward(x);
  const std::vector<std::int64_t> sizes = dp.last_chunk_sizes();
  chunk0->forward(x.slice(0, sizes[0]));
  full->forward(x);
  auto dist = [&](nn::Module& other) {
    const std::vector<double> a = probe->buffer(bn_name).to_vector<double>();
    const std::vector<double> b = other.buffer(bn_name).to_vector<double>();
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  };
  std::printf("batchnorm: after one DataParallel forward of %lld rows, '%s' differs by %.3g from "
              "device 0's chunk alone (%lld rows) and by %.3g from the full batch\n",
              static_cast<long long>(x.size(0)), bn_name.c_str(), dist(*chunk0),
              static_cast<long long>(sizes[0]), dist(*full));
  for (const auto& r : dp.replicas()) r->clear_saved();
  chunk0->clear_saved();
  full->clear_saved();
}

}  // namespace mgpu::lesson02
