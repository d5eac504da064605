/// @file device.h
/// @brief Logical devices (cpu:i, cuda:i) and how they map onto the hardware.
///
/// A Device is a kind and an index. Logical `cuda:i` runs on physical GPU `i % count`, so a
/// program written for four GPUs runs unchanged on one. Each `cpu:i` is a separate memory
/// space with its own memory counters, so single-process multi-device lessons run on a
/// machine with no GPU at all.
#pragma once

#include <string>
#include <vector>

namespace mgpu {

/// Where a tensor lives and where its ops run.
struct Device {
  /// The memory space a device belongs to.
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;  ///< cpu or cuda
  int index = 0;          ///< logical index: `cuda:5` is kind cuda, index 5

  /// cpu:0.
  Device() = default;
  /// Device `i` of kind `k` (logical; no check that it exists).
  Device(Kind k, int i) : kind(k), index(i) {}

  /// Host memory space `i` (cpu:i).
  static Device cpu(int i = 0) { return {Kind::cpu, i}; }
  /// Logical GPU `i` (cuda:i); runs on physical GPU i % cuda_device_count().
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  /// Parses "cpu", "cpu:1", "cuda", "cuda:3"; throws mgpu::Error with the accepted forms.
  static Device parse(const std::string& text);

  /// True for cpu:i.
  bool is_cpu() const { return kind == Kind::cpu; }
  /// True for cuda:i.
  bool is_cuda() const { return kind == Kind::cuda; }
  /// "cpu:0", "cuda:1".
  std::string str() const;
  /// Same kind and same logical index (cuda:0 and cuda:2 differ even when they share a GPU).
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  /// Negation of operator==.
  bool operator!=(const Device& o) const { return !(*this == o); }
};

/// Parses a comma-separated list such as "cpu:0,cpu:1" or "cuda:0,cuda:1".
std::vector<Device> parse_devices(const std::string& text);

/// True when this build has the CUDA backend and at least one GPU is visible.
bool cuda_available();
/// Number of physical GPUs visible (0 when built without CUDA or without a GPU).
int cuda_device_count();
/// Physical GPU that logical device `cuda:i` runs on: i % cuda_device_count().
/// Throws mgpu::Error when there is no GPU, saying how to run on the CPU instead.
int physical_gpu(const Device& d);
/// True when the library was compiled with the CUDA backend.
bool built_with_cuda();

/// What a device is: name, memory, compute capability, SM count (zeros on the CPU).
struct DeviceProperties {
  std::string name;               ///< GPU model name, or "host CPU memory space i"
  std::size_t total_memory = 0;   ///< global memory in bytes
  /// Compute capability, major part (9 for an H100; `minor` is the part after the dot).
  int major = 0, minor = 0;  ///< compute capability, minor part (0 for an H100)
  int multiprocessors = 0;        ///< number of streaming multiprocessors (SMs)
  double memory_bandwidth_gbs = 0;  ///< theoretical peak from clock and bus width (0 if unknown)
};
/// Properties of the physical GPU behind `d`; for a CPU device only `name` is set.
DeviceProperties device_properties(const Device& d);

/// One line per device: "cuda:1 -> GPU 0 (NVIDIA H100 ...)" or "cpu:1 -> host memory space 1".
/// Programs print this so the learner sees the mapping they ran on. Without a GPU, a CUDA
/// device in the list throws mgpu::Error suggesting as many CPU devices: `--device cpu`
/// for one, `--device cpu:0,cpu:1` for two.
std::string describe_mapping(const std::vector<Device>& devices);

/// Makes `d`'s physical GPU current for the calling thread for the guard's lifetime
/// (no-op on the CPU). On destruction it restores the GPU it found only if it changed it and
/// the thread already had a CUDA context there: a fresh thread is left on `d`'s GPU, since
/// "restoring" the device 0 it reports would create a context on GPU 0.
class DeviceGuard {
 public:
  /// Switches to `d`'s physical GPU, remembering what to restore on destruction.
  explicit DeviceGuard(const Device& d);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // the GPU to make current again; -1: nothing to restore
};

/// Makes `d`'s physical GPU current for the calling thread, for good (no-op on the CPU). A
/// thread that works for one device calls it once when it starts, so that what it does later
/// (pinned allocations, events, library calls) uses that GPU and no other.
void set_thread_device(const Device& d);

}  // namespace mgpu
