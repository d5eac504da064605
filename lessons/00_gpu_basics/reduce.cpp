// Task 2, CPU side: the block_sums dispatcher, its CPU twin, and sum(), which finishes the
// reduction with more passes. The CUDA kernel is in reduce.cu.
//
// The CPU twin does exactly what one CUDA block does, one tile after another: the same
// tiles, the same pairwise tree, so the two give the same floats and you can read the
// kernel's algorithm in plain C++.
#include "basics.h"

#include "dispatch.h"  // MGPU_IF_CUDA

namespace mgpu::lesson00 {

Tensor block_sums(const Tensor& x) {
  check_defined("block_sums", x, "x");
  MGPU_CHECK(x.dtype() == DType::f32, "block_sums: lesson 00 works on f32 tensors, got ",
             x.str(), " (convert with .to(mgpu::DType::f32))");
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(return block_sums_cuda(x));
  }
  return block_sums_cpu(x);
}

Tensor block_sums_cpu(const Tensor& x) {
  const std::int64_t n = x.numel();
  const std::int64_t tiles = (n + kTile - 1) / kTile;  // the last tile may be short
  Tensor partial = Tensor::empty({tiles}, DType::f32, x.device());
  // What you have: kThreadsPerBlock and kTile = 2 * kThreadsPerBlock (basics.h); n, tiles;
  // partial.data<float>() (tiles floats to write); x.data<float>() (n contiguous floats).
  // TODO(task2) BEGIN: partial[b] = the sum of tile b, made of exactly the additions one CUDA
  // block of kThreadsPerBlock threads makes, in their order (chapter §5), so that this twin
  // and the kernel give the same floats; elements past n count as 0. Input x f32 [n]; output
  // partial f32 [tiles], tiles = ceil(n / kTile). Stuck: tools/hint 00 2 (about 14 lines).
  MGPU_FAIL("TODO(task2): block_sums_cpu is not written yet (lessons/00_gpu_basics/reduce.cpp)");
  // TODO(task2) END
  return partial;
}

float sum(const Tensor& x) {
  // Every pass shrinks the data kTile-fold: 10^8 floats -> 195313 -> 382 -> 1 partial
  // sums. Passes after the first read so little that their cost hardly shows.
  Tensor partial = block_sums(x);
  while (partial.numel() > 1) partial = block_sums(partial);
  return partial.numel() == 0 ? 0.0f : static_cast<float>(partial.item());
}

}  // namespace mgpu::lesson00
