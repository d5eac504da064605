// Logical devices and their mapping onto physical GPUs (cuda:i -> GPU i % count).
#include "mgpu/device.h"

#include <cstdlib>
#include <sstream>

#include "core/current_device.h"
#include "mgpu/error.h"

#ifdef MGPU_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace mgpu {

Device Device::parse(const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    const std::string num = text.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(num.c_str(), &end, 10);
    MGPU_CHECK(!num.empty() && *end == '\0' && v >= 0 && v < 1024, "bad device '", text,
               "': the index after ':' must be a small non-negative integer (e.g. cuda:1)");
    index = static_cast<int>(v);
  }
  if (kind == "cpu") return Device::cpu(index);
  if (kind == "cuda" || kind == "gpu") return Device::cuda(index);
  MGPU_FAIL("bad device '", text, "': expected cpu, cpu:N, cuda or cuda:N");
}

std::string Device::str() const {
  return std::string(is_cpu() ? "cpu:" : "cuda:") + std::to_string(index);
}

std::vector<Device> parse_devices(const std::string& text) {
  std::vector<Device> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(Device::parse(item));
  }
  MGPU_CHECK(!out.empty(), "no device in '", text, "' (expected e.g. cpu:0,cpu:1 or cuda:0,cuda:1)");
  return out;
}

bool built_with_cuda() {
#ifdef MGPU_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef MGPU_WITH_CUDA
  // Asked once: the answer does not change while the process runs. A machine without a
  // driver or GPU reports an error here, which simply means "no GPU".
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls start clean
      n = 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace {

// Why `asked` cannot run here, and the CPU devices to ask for instead: programs that take
// one device (--device cpu) and those that take a list (--device cpu:0,cpu:1) differ.
[[noreturn]] void fail_no_gpu(const std::string& asked, std::size_t devices) {
  std::string instead = "cpu";
  if (devices > 1) {
    instead = "cpu:0";
    for (std::size_t i = 1; i < devices; ++i) instead += ",cpu:" + std::to_string(i);
  }
  MGPU_FAIL(asked, " was asked for, but ",
            built_with_cuda() ? "no CUDA GPU is visible on this machine"
                              : "this build has no CUDA backend",
            ": run with --device ", instead, devices > 1 ? " (logical devices on the host)" : "");
}

}  // namespace

int physical_gpu(const Device& d) {
  MGPU_CHECK(d.is_cuda(), "physical_gpu: ", d.str(), " is not a CUDA device");
  const int n = cuda_device_count();
  if (n == 0) fail_no_gpu(d.str(), 1);
  return d.index % n;
}

DeviceProperties device_properties(const Device& d) {
  DeviceProperties p;
  if (d.is_cpu()) {
    p.name = "host CPU memory space " + std::to_string(d.index);
    return p;
  }
#ifdef MGPU_WITH_CUDA
  const int gpu = physical_gpu(d);
  cudaDeviceProp prop{};
  MGPU_CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
  p.name = prop.name;
  p.total_memory = prop.totalGlobalMem;
  p.major = prop.major;
  p.minor = prop.minor;
  p.multiprocessors = prop.multiProcessorCount;
  int clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, gpu);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, gpu);
  // DDR: two transfers per clock.
  p.memory_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
#endif
  return p;
}

std::string describe_mapping(const std::vector<Device>& devices) {
  // Programs call this first, with every device they were given: the one place that knows
  // whether a CPU suggestion should be one device or a list.
  if (cuda_device_count() == 0) {
    std::string asked;
    bool any_cuda = false;
    for (const Device& d : devices) {
      asked += (asked.empty() ? "" : ",") + d.str();
      any_cuda = any_cuda || d.is_cuda();
    }
    if (any_cuda) fail_no_gpu(asked, devices.size());
  }
  std::ostringstream os;
  for (const Device& d : devices) {
    os << d.str() << " -> ";
    if (d.is_cpu()) {
      os << "host memory space " << d.index << " (CPU)\n";
    } else {
      const int gpu = physical_gpu(d);
      os << "GPU " << gpu << " (" << device_properties(d).name << ")";
      if (d.index != gpu) os << " [shared: " << cuda_device_count() << " physical GPU(s)]";
      os << "\n";
    }
  }
  return os.str();
}

DeviceGuard::DeviceGuard(const Device& d) {
#ifdef MGPU_WITH_CUDA
  if (d.is_cuda()) {
    int found = 0;
    MGPU_CUDA_CHECK(cudaGetDevice(&found));
    const int gpu = physical_gpu(d);
    // Restore only what this guard changes, and only to a context the thread already had:
    // see current_device.h for the context a plain restore of "device 0" would create.
    previous_ = detail::device_to_restore(found, gpu, gpu != found && detail::thread_has_cuda_context());
    if (gpu != found) MGPU_CUDA_CHECK(cudaSetDevice(gpu));
  }
#else
  (void)d;
#endif
}

DeviceGuard::~DeviceGuard() {
#ifdef MGPU_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

void set_thread_device(const Device& d) {
#ifdef MGPU_WITH_CUDA
  if (d.is_cuda()) MGPU_CUDA_CHECK(cudaSetDevice(physical_gpu(d)));
#else
  (void)d;
#endif
}

}  // namespace mgpu
