/// @file step_timing.h
/// @brief Lesson 09's program support (provided): when each phase of a step happened, on
/// the CPU and on a GPU, and every rank's breakdown collected, summed up and written.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/comm_log.h"
#include "mgpu/perf/time_cost.h"
#include "mgpu/stream.h"

namespace mgpu::lesson09 {

/// The moments of a step the program marks, in order.
enum class Mark {
  step_begin,      ///< the loop asks for the next batch
  data_ready,      ///< the batch is in host memory
  on_device,       ///< ... and on the device
  forward_begin,   ///< the model's first layer starts (a ClockMarker)
  forward_end,     ///< the loss is computed
  backward_begin,  ///< the model's last layer starts its backward (a ClockMarker)
  backward_end,    ///< the model's first layer finished its backward (a ClockMarker)
  reduced,         ///< DDP's backward returned: gradients averaged
  optimizer_end,   ///< the optimizer step is done
  count
};

/// When the marks of one step happened. On the CPU a mark is the host clock. On a GPU the
/// host only queues work, so each mark is a CUDA timing event on the compute stream, and
/// its time is the event's: begin_step() waits for the device first (the step starts with
/// the GPU idle), so the events' offsets from the first mark are the GPU's own times on
/// the host's clock.
class PhaseClock {
 public:
  /// Marks on `device`'s compute stream.
  explicit PhaseClock(Device device);
  /// Starts a step: waits for the device, marks step_begin.
  void begin_step();
  /// Marks `m` now (in stream order on a GPU).
  void mark(Mark m);
  /// Ends the step: waits for the last mark, resolves every mark's time.
  void end_step();
  /// Seconds on app::now_s()'s clock at which `m` happened in the last finished step.
  double at(Mark m) const { return times_[static_cast<int>(m)]; }
  /// [at(a), at(b)].
  perf::Interval between(Mark a, Mark b) const { return {at(a), at(b)}; }

 private:
  Device device_;
  double host_begin_ = 0;
  std::array<std::unique_ptr<Event>, static_cast<int>(Mark::count)> events_;
  std::array<bool, static_cast<int>(Mark::count)> marked_{};
  std::array<double, static_cast<int>(Mark::count)> times_{};
};

/// An identity layer that marks a PhaseClock: put one first and one last in the model
/// (a Sequential), and forward and backward are timed from inside DDP's own calls. It has
/// no parameters, so DDP's buckets do not change.
class ClockMarker : public nn::Module {
 public:
  /// Marks `on_forward` when forward passes through, `on_backward` when backward does
  /// (Mark::count: no mark).
  ClockMarker(PhaseClock& clock, Mark on_forward, Mark on_backward)
      : clock_(clock), on_forward_(on_forward), on_backward_(on_backward) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<nn::Module> clone() const override;
  std::string describe() const override { return "ClockMarker"; }

 private:
  PhaseClock& clock_;
  Mark on_forward_, on_backward_;
};

/// One step of one rank, as measured.
struct StepSample {
  int epoch = 0;                  ///< 0-based
  std::int64_t step = 0;          ///< in the run, 0-based
  std::int64_t batch = 0;         ///< samples on this rank
  bool synchronized = true;       ///< false under no_sync (no all-reduce this step)
  perf::Phases phases;            ///< step_phases of its record (seconds)
  double backward_s = 0;          ///< backward's length, for the buckets' ready shares
  /// Each bucket's all-reduce: bytes, launch and completion relative to backward's start.
  std::vector<parallel::CommRecord> buckets;
};

/// Every rank's StepSamples: per-epoch means for the metrics line, and all of them (rank
/// 0 gathers) for the breakdown file.
class Breakdown {
 public:
  /// Steps with index < `warmup_steps` are recorded but left out of the means.
  explicit Breakdown(std::int64_t warmup_steps) : warmup_(warmup_steps) {}
  /// Records one step.
  void add(StepSample s) { samples_.push_back(std::move(s)); }
  /// The mean phases of epoch `epoch`'s measured steps, over every rank of `group` (a
  /// collective: every rank calls it), and the largest rank mean of each phase.
  struct EpochMeans {
    perf::Phases mean;        ///< mean over ranks of each rank's mean
    perf::Phases slowest;     ///< per phase, the largest rank mean
    std::int64_t steps = 0;   ///< measured steps of this epoch (per rank)
  };
  EpochMeans epoch_means(int epoch, dist::ProcessGroup& group) const;
  /// Rank 0 writes every rank's steps as JSON lines to `path` (a collective).
  void write(const std::string& path, dist::ProcessGroup& group) const;

 private:
  std::int64_t warmup_;
  std::vector<StepSample> samples_;
};

}  // namespace mgpu::lesson09
