// The stream a lesson kernel launches on. Included by the .cu files only.
#pragma once

#include <cuda_runtime.h>

#include "mgpu/stream.h"

namespace mgpu::lesson00 {

/// The stream this thread's work on `d` goes to: mgpu's current stream of d, so lesson
/// kernels are ordered with the library's own ops on that device.
inline cudaStream_t current_stream(const Device& d) {
  return static_cast<cudaStream_t>(Stream::current(d).handle());
}

}  // namespace mgpu::lesson00
