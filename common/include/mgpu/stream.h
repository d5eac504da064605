/// @file stream.h
/// @brief Streams and events: how work is ordered on a device.
///
/// Each logical CUDA device has two streams: `compute` (kernels, cuBLAS) and `comm`
/// (communication copies: the mpi backend's staging, a pipeline's sends), so communication
/// can overlap compute. NCCL kernels run on a stream of their process group's own instead:
/// kernels of one stream run in issue order, and two groups' NCCL kernels on one stream
/// could wait for each other across ranks.
/// Events order one stream after another without blocking the host. On the CPU every
/// op runs synchronously, so streams and events are no-ops that keep the same code paths.
#pragma once

#include <cstddef>
#include <memory>

#include "mgpu/device.h"

namespace mgpu {

/// A handle to a CUDA stream of one logical device (or the CPU's "null" stream).
class Stream {
 public:
  /// The two streams of each CUDA device: compute() for kernels, comm() for communication copies.
  enum class Role { compute, comm };
  /// The CPU's null stream on cpu:0.
  Stream() = default;
  /// Wraps an existing cudaStream_t `handle` of `device` (not owned; nullptr for the CPU).
  Stream(Device device, void* handle) : device_(device), handle_(handle) {}

  /// The stream ops on `d` use unless a StreamGuard says otherwise.
  static Stream compute(const Device& d);
  /// The stream communication copies on `d` use (not the nccl backend's kernels: see above).
  static Stream comm(const Device& d);
  /// The stream ops issued by this thread on `d` go to right now.
  static Stream current(const Device& d);

  /// Blocks the host until all work queued on the stream is done.
  void synchronize() const;
  /// Device whose work this stream orders.
  const Device& device() const { return device_; }
  /// The cudaStream_t, as void* so this header needs no CUDA include (nullptr on the CPU).
  void* handle() const { return handle_; }

 private:
  Device device_;
  void* handle_ = nullptr;
};

/// Makes `s` the current stream of its device for this thread, for the guard's lifetime.
class StreamGuard {
 public:
  /// Makes `s` current, remembering the previous stream to restore on destruction.
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

/// A marker in a stream. record() puts it at the stream's current end; wait() makes another
/// stream wait for it; elapsed_ms() times GPU work between two events.
class Event {
 public:
  /// `timing` = true allows elapsed_ms(); it is off by default because timing events
  /// cost more to record. The CUDA event is created on the first record().
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Places the event after all work queued on `s` so far (on the CPU: notes the host time).
  void record(const Stream& s);
  /// Later work on `s` starts only after this event has completed.
  void wait(const Stream& s) const;
  /// Blocks the host until the event has completed.
  void synchronize() const;
  /// True once the event has completed (always true on the CPU or before record()). Never blocks.
  bool query() const;
  /// Milliseconds between `start` and this event (both recorded with timing = true).
  float elapsed_ms(const Event& start) const;

 private:
  bool timing_ = false;
  void* handle_ = nullptr;  // cudaEvent_t, created lazily on first record on a CUDA stream
  int gpu_ = -1;
  double host_time_ms_ = 0;  // CPU fallback: wall-clock time at record()
};

/// Blocks the host until all streams of `d` are idle (cudaDeviceSynchronize on its GPU).
void synchronize(const Device& d);

/// How many cuBLAS handles this process has created (0 without CUDA). Threads borrow them
/// from a pool and give them back when they end, so the count is bounded by the threads that
/// use a GPU at the same time, however many threads come and go.
std::size_t cublas_handles_created();

}  // namespace mgpu
