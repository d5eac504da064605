// Task 2, GPU side: a block-level sum. Its CPU twin is block_sums_cpu in reduce.cpp.
//
// Block b sums the tile x[b*kTile, (b+1)*kTile) and writes one partial sum. Blocks cannot
// wait for each other inside a kernel, so the partial sums are finished by another pass
// (sum() in reduce.cpp launches this kernel again on them).
#include "basics.h"
#include "core/cuda_check.h"   // MGPU_CUDA_CHECK_LAUNCH
#include "cuda_stream.h"  // current_stream(device)

namespace mgpu::lesson00 {

// Launched with kThreadsPerBlock threads per block and one block per tile.
__global__ void block_sums_kernel(const float* x, std::int64_t n, float* partial) {
  // What you have: __shared__ arrays (one per block, seen by all of its threads);
  // __syncthreads() (a barrier for the threads of one block); blockIdx.x, threadIdx.x;
  // kThreadsPerBlock and kTile (basics.h); n, x (n floats) and partial (one float per block).
  // TODO(task2) BEGIN: block b writes partial[b] = the sum of tile b, the elements
  // [b*kTile, (b+1)*kTile) with 0 past n, made of chapter §5's additions in their order.
  // Invariants: the loads are coalesced; no thread reads a shared value before its writer
  // has written it; indices are 64-bit; the floats are those of block_sums_cpu. Stuck:
  // tools/hint 00 2 (about 12 lines).
  // TODO(task2) END
}

Tensor block_sums_cuda(const Tensor& x) {
  DeviceGuard guard(x.device());
  const std::int64_t n = x.numel();
  const std::int64_t tiles = (n + kTile - 1) / kTile;
  Tensor partial = Tensor::empty({tiles}, DType::f32, x.device());
  // What you have: block_sums_kernel (above), launched as kernel<<<blocks, threads, 0,
  // stream>>>(args); current_stream(device) (cuda_stream.h); kThreadsPerBlock (basics.h);
  // MGPU_CUDA_CHECK_LAUNCH(); n, tiles, x.data<float>(), partial.data<float>().
  // TODO(task2) BEGIN: the kernel's launch (chapter §3 and §5): a block of kThreadsPerBlock
  // threads per tile, ordered with mgpu's own work on x's device, its launch errors
  // reported; nothing to launch when there is nothing to sum, and partial returned either
  // way. Stuck: tools/hint 00 2 (about 5 lines).
  MGPU_FAIL("TODO(task2): the launch of block_sums_kernel is not written yet (lessons/00_gpu_basics/reduce.cu)");
  // TODO(task2) END
  return partial;
}

}  // namespace mgpu::lesson00
