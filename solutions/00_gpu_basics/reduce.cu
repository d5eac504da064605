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
  // Shared memory: one array per block, visible to all its threads, as fast as a cache.
  __shared__ float buf[kThreadsPerBlock];
  const int t = threadIdx.x;
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kTile;
  // Step 1) neighbouring threads read neighbouring floats (coalesced), twice.
  const std::int64_t i = base + t, j = i + kThreadsPerBlock;
  buf[t] = (i < n ? x[i] : 0.0f) + (j < n ? x[j] : 0.0f);
  __syncthreads();  // every buf[t] is written before anyone reads buf[t + s]
  // Step 2) the tree: 128 threads add pairs, then 64, ... , then 1.
  for (int s = kThreadsPerBlock / 2; s > 0; s /= 2) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();  // this round's sums are done before the next round reads them
  }
  // Step 3) one thread writes the block's result.
  if (t == 0) partial[blockIdx.x] = buf[0];
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
  if (tiles == 0) return partial;
  block_sums_kernel<<<static_cast<unsigned>(tiles), kThreadsPerBlock, 0,
                      current_stream(x.device())>>>(x.data<float>(), n, partial.data<float>());
  MGPU_CUDA_CHECK_LAUNCH();
  // TODO(task2) END
  return partial;
}

}  // namespace mgpu::lesson00
