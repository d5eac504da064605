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
  // TODO(task1) END
}

void saxpy_cuda(float a, const Tensor& x, Tensor& y) {
  DeviceGuard guard(y.device());  // kernels run on the current GPU: make it y's
  // TODO(task1) BEGIN: with n = y.numel(), return early when n == 0 (a launch with zero
  // blocks is an error), pick the number of blocks so that blocks * kThreadsPerBlock >= n,
  // launch saxpy_kernel on current_stream(y.device()) and check the launch with
  // MGPU_CUDA_CHECK_LAUNCH() (about 6 lines).
  MGPU_FAIL("TODO(task1): the launch of saxpy_kernel is not written yet (lessons/00_gpu_basics/saxpy.cu); "
            "called with a = ", a, ", x ", x.str(), ", y ", y.str());
  // TODO(task1) END
}

}  // namespace mgpu::lesson00
