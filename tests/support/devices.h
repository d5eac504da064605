// CPU device lists: the "devices" of single-process multi-device tests, each a CPU device
// with its own index (and its own allocator counters and stream).
#pragma once

#include <vector>

#include "mgpu/device.h"

namespace mgpu::testing {

/// The CPU devices first, first + 1, ..., first + k - 1.
inline std::vector<Device> cpus(int k, int first = 0) {
  std::vector<Device> d;
  for (int i = 0; i < k; ++i) d.push_back(Device::cpu(first + i));
  return d;
}

}  // namespace mgpu::testing
