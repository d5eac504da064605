// Private, CUDA only: what the kernels share. The device-side element types and their
// compute type, the dtype -> type dispatch, the launch geometry of grid-stride loops, and
// warp/block reductions built from shuffles and shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "dispatch.h"
#include "mgpu/error.h"
#include "mgpu/tensor.h"

namespace mgpu::detail {

// ---- element types -----------------------------------------------------------------
// mgpu::half and mgpu::bfloat16 hold the same 16 bits as __half and __nv_bfloat16, so a
// tensor's memory can be read through the CUDA types directly.
template <typename T>
T* device_ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// The compute type (dispatch.h) of the CUDA 16-bit types: float, as for mgpu::half and
// mgpu::bfloat16; the float and double overloads are dispatch.h's own.
template <> struct compute_type<__half> { using type = float; };
template <> struct compute_type<__nv_bfloat16> { using type = float; };

__device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 v) { return __bfloat162float(v); }

template <> __device__ __forceinline__ __half from_compute<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_compute<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// nvcc fuses a * b + c into one FMA (one rounding instead of two); the CPU build does
// not. Where the CPU result should be reproduced exactly, products go through these.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

/// Calls f(T{}) with T the device type of a floating dtype.
template <typename F>
void dispatch_cuda_floating(DType dtype, const char* op, F&& f) {
  dispatch_floating_as<__half, __nv_bfloat16>(dtype, op, " is not supported on CUDA", f);
}

/// Calls f(T{}) with T the device type of any dtype.
template <typename F>
void dispatch_cuda_all(DType dtype, F&& f) {
  dispatch_all_as<__half, __nv_bfloat16>(dtype, f);
}

// ---- launch geometry ------------------------------------------------------------------
constexpr int kBlock = 256;  // threads per block: 8 warps, a good default on sm_75..sm_90

/// Blocks for a grid-stride loop over n elements (n >= 1). Capped: past ~64k blocks the
/// GPU is full anyway, and each thread simply takes several elements.
inline unsigned grid_for(std::int64_t n, int block = kBlock) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + block - 1) / block, 65536));
}

/// The first element this thread handles, and how far it jumps to the next one: the
/// whole grid's width, so consecutive threads always touch consecutive elements
/// (coalesced) however many elements there are.
__device__ __forceinline__ std::int64_t grid_start() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

/// How launch_grid_stride passes an argument: a Tensor as a T pointer to its data,
/// anything else as it is (a kernel's scalar parameter converts it, e.g. double to float).
template <typename T, typename V>
auto kernel_arg(const V& v) {
  if constexpr (std::is_same_v<V, Tensor>) return device_ptr<T>(v);
  else return v;
}

/// The launcher of every op whose kernel is one grid-stride loop over a tensor: runs
/// kernel_for(T{}) as kernel(args..., n) over the n elements of `x`, on x's stream, with T
/// the device type of x's dtype, and checks the launch. kernel_for maps a type tag to the
/// kernel, e.g. [](auto tag) { return relu_kernel<decltype(tag)>; }. The caller ensures n >= 1.
template <typename KernelFor, typename... Args>
void launch_grid_stride(const char* op, const Tensor& x, KernelFor kernel_for,
                        const Args&... args) {
  const std::int64_t n = x.numel();
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernel_for(tag)<<<grid_for(n), kBlock, 0, stream>>>(kernel_arg<T>(args)..., n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

// ---- reductions ---------------------------------------------------------------------
struct SumOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};

/// Reduces v over the 32 lanes of a warp. The butterfly (xor) pattern leaves the result
/// in every lane: in step o each lane combines with the lane whose id differs in bit o.
template <typename A, typename Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Reduces v over the whole block (blockDim.x a multiple of 32); every thread gets the
/// result. Step 1: each warp reduces its 32 values with shuffles (no shared memory).
/// Step 2: lane 0 of each warp leaves its partial in shared memory. Step 3: every warp
/// reads all the partials (at most 32) and reduces them itself, so no broadcast is needed.
template <typename A, typename Op>
__device__ A block_reduce(A v, Op op, A identity) {
  __shared__ A warp_partials[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  v = lane < num_warps ? warp_partials[lane] : identity;
  v = warp_reduce(v, op);
  __syncthreads();  // the partials may be overwritten by the next call
  return v;
}

}  // namespace mgpu::detail

// Kernels outside ops/ live in their own module's detail namespace. These lines make the
// helpers above visible there, so no kernel file needs a list of using-declarations; a
// new kernel namespace adds its line here.
namespace mgpu::amp::detail { using namespace mgpu::detail; }
namespace mgpu::nn::detail { using namespace mgpu::detail; }
namespace mgpu::optim::detail { using namespace mgpu::detail; }
namespace mgpu::parallel::detail { using namespace mgpu::detail; }
