// cast_ on CUDA: one templated grid-stride kernel, instantiated for all 36 (Dst, Src)
// pairs. The conversion rules are those of convert.h on the CPU, written with CUDA's
// intrinsics, and NaNs go through nan_bits.h, so both backends give the same bits.
#include "cuda_util.cuh"
#include "nan_bits.h"
#include "ops_cuda.h"
#include "saturate.h"

namespace mgpu::detail {

// Step 1) widen: the exact value of any element, as double (floats) or int64 (integers).
__device__ __forceinline__ double widen_d(float v) { return v; }
__device__ __forceinline__ double widen_d(double v) { return v; }
__device__ __forceinline__ double widen_d(__half v) { return __half2float(v); }
__device__ __forceinline__ double widen_d(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ std::int64_t widen_d(std::int32_t v) { return v; }
__device__ __forceinline__ std::int64_t widen_d(std::int64_t v) { return v; }

// Step 2) narrow to the destination. 16-bit floats round through float (as on the CPU);
// float -> integer truncates and saturates (saturate.h), i64 -> i32 wraps.
template <typename Dst, typename Wide> __device__ __forceinline__ Dst narrow_d(Wide v) {
  return static_cast<Dst>(v);  // f32, f64 from either; i32/i64 from int64
}
template <> __device__ __forceinline__ __half narrow_d<__half>(double v) {
  return __float2half_rn(static_cast<float>(v));
}
template <> __device__ __forceinline__ __half narrow_d<__half>(std::int64_t v) {
  return __float2half_rn(static_cast<float>(v));
}
template <> __device__ __forceinline__ __nv_bfloat16 narrow_d<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}
template <> __device__ __forceinline__ __nv_bfloat16 narrow_d<__nv_bfloat16>(std::int64_t v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}
template <> __device__ __forceinline__ std::int32_t narrow_d<std::int32_t>(double v) {
  return saturate_i32(v);
}
template <> __device__ __forceinline__ std::int64_t narrow_d<std::int64_t>(double v) {
  return saturate_i64(v);
}

// NaNs: the GPU's conversions return the canonical NaN, while the CPU keeps the sign and the
// top of the payload (nan_bits.h). A NaN therefore takes the bit path of nan_bits.h, which
// gives the CPU's bits; integers hold no NaN, and a NaN cast to an integer is 0 on both.
__device__ __forceinline__ bool is_nan_d(float v) { return v != v; }
__device__ __forceinline__ bool is_nan_d(double v) { return v != v; }
__device__ __forceinline__ bool is_nan_d(__half v) { return __hisnan(v); }
__device__ __forceinline__ bool is_nan_d(__nv_bfloat16 v) { return __hisnan(v); }
__device__ __forceinline__ bool is_nan_d(std::int32_t) { return false; }
__device__ __forceinline__ bool is_nan_d(std::int64_t) { return false; }

__device__ __forceinline__ std::uint64_t nan_wide_d(float v) { return nan_wide_from_f32(__float_as_uint(v)); }
__device__ __forceinline__ std::uint64_t nan_wide_d(double v) {
  return nan_wide_from_f64(static_cast<std::uint64_t>(__double_as_longlong(v)));
}
__device__ __forceinline__ std::uint64_t nan_wide_d(__half v) { return nan_wide_from_f16(__half_as_ushort(v)); }
__device__ __forceinline__ std::uint64_t nan_wide_d(__nv_bfloat16 v) {
  return nan_wide_from_bf16(__bfloat16_as_ushort(v));
}
template <typename Src> __device__ __forceinline__ std::uint64_t nan_wide_d(Src) { return 0; }

template <typename Dst> __device__ __forceinline__ Dst nan_narrow_d(std::uint64_t) { return Dst(0); }
template <> __device__ __forceinline__ float nan_narrow_d<float>(std::uint64_t w) {
  return __uint_as_float(nan_to_f32(w));
}
template <> __device__ __forceinline__ double nan_narrow_d<double>(std::uint64_t w) {
  return __longlong_as_double(static_cast<long long>(nan_to_f64(w)));
}
template <> __device__ __forceinline__ __half nan_narrow_d<__half>(std::uint64_t w) {
  return __ushort_as_half(nan_to_f16(w));
}
template <> __device__ __forceinline__ __nv_bfloat16 nan_narrow_d<__nv_bfloat16>(std::uint64_t w) {
  return __ushort_as_bfloat16(nan_to_bf16(w));
}

template <typename Dst, typename Src>
__global__ void cast_kernel(Dst* out, const Src* in, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const Src v = in[i];
    out[i] = is_nan_d(v) ? nan_narrow_d<Dst>(nan_wide_d(v)) : narrow_d<Dst>(widen_d(v));
  }
}

void cast_cuda(Tensor& dst, const Tensor& src) {
  const std::int64_t n = src.numel();
  cudaStream_t stream = launch_stream(src.device());
  dispatch_cuda_all(src.dtype(), [&](auto src_tag) {
    using Src = decltype(src_tag);
    dispatch_cuda_all(dst.dtype(), [&](auto dst_tag) {
      using Dst = decltype(dst_tag);
      cast_kernel<Dst, Src><<<grid_for(n), kBlock, 0, stream>>>(device_ptr<Dst>(dst),
                                                                device_ptr<Src>(src), n);
      MGPU_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace mgpu::detail
