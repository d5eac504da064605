// Task 2, GPU side: a block-level sum. Its CPU twin is block_sums_cpu in reduce.cpp.
//
// Block b sums the tile x[b*kTile, (b+1)*kTile) and writes one partial sum. Blocks cannot
// wait for each other inside a kernel, so the partial sums are finished by another pass
// (sum() in reduce.cpp launches this kernel again on them).
#include "basics.h"
#include "cuda_check.h"   // MGPU_CUDA_CHECK_LAUNCH
#include "cuda_stream.h"  // current_stream(device)

namespace mgpu::lesson00 {

// Launched with kThreadsPerBlock threads per block and one block per tile.
__global__ void block_sums_kernel(const float* x, std::int64_t n, float* partial) {
  // TODO(task2) BEGIN: declare __shared__ float buf[kThreadsPerBlock]; (1) thread t loads
  // x[base + t] + x[base + t + kThreadsPerBlock] (0 past n) into buf[t], with
  // base = blockIdx.x * kTile in 64 bits; __syncthreads(); (2) for s = kThreadsPerBlock/2
  // down to 1: if t < s, buf[t] += buf[t + s]; __syncthreads() after each round;
  // (3) thread 0 writes buf[0] to partial[blockIdx.x] (about 12 lines).
  // TODO(task2) END
}

Tensor block_sums_cuda(const Tensor& x) {
  DeviceGuard guard(x.device());
  const std::int64_t n = x.numel();
  const std::int64_t tiles = (n + kTile - 1) / kTile;
  Tensor partial = Tensor::empty({tiles}, DType::f32, x.device());
  // TODO(task2) BEGIN: return partial at once when tiles == 0; otherwise launch
  // block_sums_kernel with one block per tile and kThreadsPerBlock threads on
  // current_stream(x.device()), and check the launch (about 5 lines).
  MGPU_FAIL("TODO(task2): the launch of block_sums_kernel is not written yet (lessons/00_gpu_basics/reduce.cu)");
  // TODO(task2) END
  return partial;
}

}  // namespace mgpu::lesson00
