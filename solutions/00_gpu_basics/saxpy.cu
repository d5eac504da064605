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
  // TODO(task1) BEGIN: compute this thread's global index i from blockIdx.x, blockDim.x and
  // threadIdx.x (in 64 bits), and, if i < n, update y[i] with the CPU twin's roundings: the
  // product rounded on its own (__fmul_rn), then the sum (about 3 lines; the chapter's "Why
  // a GPU result may differ in the last bit" says why).
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
  // TODO(task1) BEGIN: with n = y.numel(), return early when n == 0 (a launch with zero
  // blocks is an error), pick the number of blocks so that blocks * kThreadsPerBlock >= n,
  // launch saxpy_kernel on current_stream(y.device()) and check the launch with
  // MGPU_CUDA_CHECK_LAUNCH() (about 6 lines).
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
