/// @file traffic.h
/// @brief Lesson 02: counts the bytes DataParallel moves between devices, per phase.
///
/// DataParallel is a hub-and-spoke design: the inputs leave device 0, the parameters are
/// broadcast from device 0, outputs and gradients come back to device 0. Counting every
/// copy by phase and by device makes that imbalance a number the learner can read.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/tensor.h"

namespace mgpu::lesson02 {

/// The phases of one DataParallel step, in the order they happen.
enum class Phase { scatter, broadcast, gather, grad_scatter, reduce };
/// "scatter", "broadcast", ...
const char* phase_name(Phase p);

/// A thread-safe tally of copied bytes: by phase, and into/out of each device.
/// Copies from a device to itself cost nothing and are not counted.
class Traffic {
 public:
  void record(Phase phase, const Device& from, const Device& to, std::size_t bytes);
  /// Everything back to zero (e.g. after the warm-up step).
  void reset();

  std::size_t bytes(Phase phase) const;
  /// Bytes that left `d` plus bytes that arrived on `d`, over all phases.
  std::size_t bytes_through(const Device& d) const;
  std::size_t bytes_sent(const Device& d) const;
  std::size_t bytes_received(const Device& d) const;
  std::size_t total() const;
  /// A few lines: bytes per phase and per device, for the program's report.
  std::string report(const std::vector<Device>& devices) const;

 private:
  mutable std::mutex mutex_;
  std::map<Phase, std::size_t> by_phase_;
  std::map<std::string, std::size_t> sent_, received_;  // keyed by Device::str()
};

/// A copy of `src` on `to`, recorded in `traffic` (may be null) under `phase`.
/// Returns `src` itself, uncounted, when it already lives on `to`.
Tensor counted_to(const Tensor& src, const Device& to, Phase phase, Traffic* traffic);
/// dst <- src (any two devices), recorded in `traffic` (may be null) under `phase`.
void counted_copy(Tensor& dst, const Tensor& src, Phase phase, Traffic* traffic);

/// "1.50 MiB", "312 B": bytes for humans.
std::string format_bytes(std::size_t bytes);

}  // namespace mgpu::lesson02
