// The driver-side questions of current_device.h. The library links only the CUDA runtime,
// so the three driver functions are looked up through the runtime's entry-point query
// instead of linking libcuda.
#include "core/current_device.h"

#ifdef MGPU_WITH_CUDA
#include <cuda.h>  // the driver's types only; nothing of libcuda is linked

#include "core/cuda_check.h"

namespace mgpu::detail {
namespace {

// The driver function `name`, or nullptr where this driver has none.
void* driver_function(const char* name) {
  void* fn = nullptr;
  // The query's signature changed twice: with a result code in 12.0, by version in 12.5.
#if CUDART_VERSION >= 12050
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  const bool ok = err == cudaSuccess && found == cudaDriverEntryPointSuccess;
#elif CUDART_VERSION >= 12000
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
  const bool ok = err == cudaSuccess && found == cudaDriverEntryPointSuccess;
#else
  const bool ok = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault) == cudaSuccess;
#endif
  if (!ok || fn == nullptr) {
    cudaGetLastError();  // not sticky; keep it from surfacing against a later call
    return nullptr;
  }
  return fn;
}

using CtxGetCurrent = CUresult (*)(CUcontext*);
using DeviceGet = CUresult (*)(CUdevice*, int);
using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);

}  // namespace

bool thread_has_cuda_context() {
  static const auto get_current = reinterpret_cast<CtxGetCurrent>(driver_function("cuCtxGetCurrent"));
  if (!get_current) return true;
  CUcontext ctx = nullptr;
  // CUDA_ERROR_NOT_INITIALIZED: the driver has not started, so no thread has a context.
  return get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr;
}

bool primary_context_active(int gpu) {
  static const auto device_get = reinterpret_cast<DeviceGet>(driver_function("cuDeviceGet"));
  static const auto get_state =
      reinterpret_cast<PrimaryCtxGetState>(driver_function("cuDevicePrimaryCtxGetState"));
  MGPU_CHECK(device_get && get_state, "primary_context_active: the CUDA driver has no ",
             "cuDevicePrimaryCtxGetState");
  CUdevice dev = 0;
  MGPU_CHECK(device_get(&dev, gpu) == CUDA_SUCCESS, "primary_context_active: no GPU ", gpu);
  unsigned int flags = 0;
  int active = 0;
  MGPU_CHECK(get_state(dev, &flags, &active) == CUDA_SUCCESS,
             "primary_context_active: cuDevicePrimaryCtxGetState failed for GPU ", gpu);
  return active != 0;
}

}  // namespace mgpu::detail
#endif  // MGPU_WITH_CUDA
