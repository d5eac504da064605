// Experiment (not graded): a copy whose reads are coalesced (stride 1) or scattered.
#include "basics.h"
#include "core/cuda_check.h"
#include "cuda_stream.h"

namespace mgpu::lesson00 {

// Thread i writes dst[i] (a warp's 32 writes fill one 128-byte line) and reads
// src[(i % stride) * rows + i / stride]. With stride 1 the reads are neighbours too: 4
// 32-byte sectors serve a warp. With stride >= 32 each thread reads from its own sector:
// 32 sectors per warp, of which 4 bytes each are used. The caches catch part of the waste
// (the next warp reads the floats beside them); the timing tells how much they catch.
// stride = 2^log2_stride, so i % stride and i / stride are a mask and a shift (a 64-bit
// division would cost more than the memory access we want to time).
__global__ void strided_copy_kernel(float* dst, const float* src, std::int64_t n,
                                    std::int64_t rows, int log2_stride) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t k = i & ((std::int64_t{1} << log2_stride) - 1);  // i % stride
  const std::int64_t j = i >> log2_stride;                             // i / stride
  if (i < n) dst[i] = src[k * rows + j];
}

void strided_copy_cuda(Tensor& dst, const Tensor& src, std::int64_t stride) {
  DeviceGuard guard(src.device());
  const std::int64_t n = src.numel();
  if (n == 0) return;
  int log2_stride = 0;
  while ((std::int64_t{1} << log2_stride) < stride) ++log2_stride;
  const std::int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  strided_copy_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0,
                        current_stream(src.device())>>>(dst.data<float>(), src.data<float>(),
                                                        n, n / stride, log2_stride);
  MGPU_CUDA_CHECK_LAUNCH();
}

}  // namespace mgpu::lesson00
