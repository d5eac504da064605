// Task 1, GPU side: the SAXPY kernel and its launch. Its CPU twin is saxpy_cpu in saxpy.cpp.
//
// A kernel is the body of the CPU loop, run by one GPU thread per element. The launch
// says how many threads: a grid of blocks, each block kThreadsPerBlock threads.
#include "basics.h"
#include "core/cuda_check.h"   // MGPU_CUDA_CHECK_LAUNCH
#include "cuda_stream.h"  // current_stream(device)

namespace mgpu::lesson00 {

// One thread computes one element: y[i] = a * x[i] + y[i], rounded as the CPU twin rounds it.
__global__ void saxpy_kernel(std::int64_t n, float a, const float* x, float* y) {
  // What you have: blockDim.x, blockIdx.x, threadIdx.x (unsigned 32-bit); __fmul_rn(a, b), a
  // product the compiler may not fuse into an FMA; n, a, x (n floats) and y (n floats).
  // TODO(task1) BEGIN: one thread's part of SAXPY (chapter §3): the thread that owns element
  // i in the grid's numbering updates y[i]; a thread past the end touches nothing.
  // Invariants: every element of [0, n) is updated exactly once; indices are 64-bit (n may
  // pass 2^31); y[i] gets the same float as saxpy_cpu gives (chapter, "Why a GPU result may
  // differ in the last bit"). Stuck: tools/hint 00 1 (about 3 lines).
  // TODO(task1) END
}

void saxpy_cuda(float a, const Tensor& x, Tensor& y) {
  DeviceGuard guard(y.device());  // kernels run on the current GPU: make it y's
  // What you have: current_stream(device) (cuda_stream.h); kThreadsPerBlock (basics.h);
  // MGPU_CUDA_CHECK_LAUNCH(); saxpy_kernel (above), launched as kernel<<<blocks, threads, 0,
  // stream>>>(args); x.data<float>(), y.data<float>(), y.numel().
  // TODO(task1) BEGIN: the kernel's launch (chapter §3): blocks of kThreadsPerBlock threads,
  // enough of them that every element has its thread, ordered with mgpu's own work on y's
  // device, the launch's errors reported. An empty y launches nothing (a grid of zero blocks
  // is an error). Stuck: tools/hint 00 1 (about 6 lines).
  MGPU_FAIL("TODO(task1): the launch of saxpy_kernel is not written yet (lessons/00_gpu_basics/saxpy.cu); "
            "called with a = ", a, ", x ", x.str(), ", y ", y.str());
  // TODO(task1) END
}

}  // namespace mgpu::lesson00
