/// @file basics.h
/// @brief Lesson 00's contract: SAXPY and a block-level sum, each with a CPU twin and a
/// CUDA kernel. The graded tests compile against exactly these declarations.
///
/// Every function takes contiguous f32 tensors. The dispatchers (saxpy_, block_sums, sum)
/// check their operands and route to the CPU twin or to the CUDA kernel by the tensors'
/// device, the same way the mgpu library's own ops do.
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::lesson00 {

/// Threads in one CUDA block of both kernels. A multiple of 32 (the warp size) and a power
/// of two, so the reduction tree halves cleanly.
inline constexpr int kThreadsPerBlock = 256;
/// Elements one block of the reduction sums: each thread starts with two of them.
inline constexpr std::int64_t kTile = 2 * kThreadsPerBlock;

// ---- Task 1: SAXPY, y = a * x + y ---------------------------------------------------------

/// y <- a * x + y, elementwise. x and y: f32, same shape, same device.
void saxpy_(float a, const Tensor& x, Tensor& y);
/// The CPU twin (saxpy.cpp): a plain loop.
void saxpy_cpu(float a, const Tensor& x, Tensor& y);

// ---- Task 2: a block-level sum reduction ----------------------------------------------------

/// Partial sums of x (f32, any shape), one per tile of kTile consecutive elements:
/// result[b] = x[b*kTile] + ... + x[b*kTile + kTile - 1] (the last tile may be short),
/// added as a pairwise tree. Shape [ceil(numel / kTile)], on x's device.
Tensor block_sums(const Tensor& x);
/// The CPU twin (reduce.cpp): the same tiles, the same tree, one tile after another.
Tensor block_sums_cpu(const Tensor& x);
/// Sum of all elements of x: block_sums again and again until one value is left
/// (the "second pass"). 0 for an empty tensor.
float sum(const Tensor& x);

#ifdef MGPU_WITH_CUDA
/// The CUDA kernel launchers (saxpy.cu, reduce.cu). Called by the dispatchers above.
void saxpy_cuda(float a, const Tensor& x, Tensor& y);
Tensor block_sums_cuda(const Tensor& x);
#endif

// ---- Experiment (not graded): coalesced vs strided reads -------------------------------------

/// dst[i] <- src[(i % stride) * (n / stride) + i / stride] for n = numel, a multiple of
/// stride, and stride a power of two (so the kernel splits i with a shift and a mask, not a
/// slow 64-bit division). Every element is read once, so each stride moves the same bytes;
/// only the access pattern changes. stride = 1 is a plain copy; larger strides spread one
/// warp's reads apart.
void strided_copy(Tensor& dst, const Tensor& src, std::int64_t stride);
void strided_copy_cpu(Tensor& dst, const Tensor& src, std::int64_t stride);
#ifdef MGPU_WITH_CUDA
void strided_copy_cuda(Tensor& dst, const Tensor& src, std::int64_t stride);
#endif

}  // namespace mgpu::lesson00
