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
  // blockIdx.x * blockDim.x threads come before this block; threadIdx.x is our place in it.
  // Cast first: the product overflows 32 bits for tensors over 2^31 elements.
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // The last block is usually only partly inside the array: its extra threads do nothing.
  // __fmul_rn keeps the product a rounding of its own, as in the CPU loop: written
  // a * x[i] + y[i], nvcc would fuse it into one FMA and round once (a last-bit difference).
  if (i < n) y[i] = __fmul_rn(a, x[i]) + y[i];
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
  const std::int64_t n = y.numel();
  if (n == 0) return;
  // Round up: n = 1000 needs 4 blocks of 256 threads (1024 threads, 24 of them idle).
  const std::int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  saxpy_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, current_stream(y.device())>>>(
      n, a, x.data<float>(), y.data<float>());
  MGPU_CUDA_CHECK_LAUNCH();
  // TODO(task1) END
}

}  // namespace mgpu::lesson00
