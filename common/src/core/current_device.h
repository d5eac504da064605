// Private: what a thread has current on the GPU side, asked without changing it.
//
// Why this matters: since CUDA 12, cudaSetDevice(g) creates GPU g's context (hundreds of MiB
// of device memory) and binds it to the calling thread. A fresh thread reports device 0 from
// cudaGetDevice before it has any context, so a guard that "restores" that 0 creates a context
// on GPU 0 in a process that never uses GPU 0: on a node with one rank per GPU, every rank's
// communication and worker threads would each leave one there.
#pragma once

namespace mgpu::detail {

/// The GPU ~DeviceGuard makes current again, or -1 for none: `found` (cudaGetDevice when the
/// guard began) only when the guard changed it (`found != wanted`) and the thread had a context
/// bound then (`had_context`). A thread with no context has nothing to go back to; making
/// `found` current would create the stray context this file is about.
inline int device_to_restore(int found, int wanted, bool had_context) {
  if (found == wanted) return -1;
  return had_context ? found : -1;
}

#ifdef MGPU_WITH_CUDA
/// True when the calling thread has a CUDA context bound (the driver's cuCtxGetCurrent). Where
/// the driver cannot be asked, true: the caller then behaves as if restoring were needed.
bool thread_has_cuda_context();
/// True when GPU `gpu`'s primary context exists in this process (cuDevicePrimaryCtxGetState).
/// Throws mgpu::Error where the driver cannot be asked. Creates nothing.
bool primary_context_active(int gpu);
#endif

}  // namespace mgpu::detail
