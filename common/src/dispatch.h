// Private helpers shared by the op implementations: dtype dispatch on the CPU, element
// conversions, and the guard that routes CUDA tensors to their kernels.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mgpu/dtype.h"
#include "mgpu/error.h"
#include "mgpu/tensor.h"

namespace mgpu::detail {

/// Reads any stored element as the type arithmetic is done in (float for 16-bit types).
inline float to_compute(half h) { return half_to_float(h); }
inline float to_compute(bfloat16 b) { return bf16_to_float(b); }
inline float to_compute(float f) { return f; }
inline double to_compute(double d) { return d; }

/// Writes a computed value back in the storage type (rounding to nearest even).
template <typename T> inline T from_compute(double v) { return static_cast<T>(v); }
template <> inline half from_compute<half>(double v) { return float_to_half(static_cast<float>(v)); }
template <> inline bfloat16 from_compute<bfloat16>(double v) {
  return float_to_bf16(static_cast<float>(v));
}

/// The arithmetic type of a storage type: float for half/bf16, itself otherwise.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<half> { using type = float; };
template <> struct compute_type<bfloat16> { using type = float; };

/// Calls f(T{}) with T the C++ type of `dtype`, for the four floating dtypes.
template <typename F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::f16: f(half{}); break;
    case DType::bf16: f(bfloat16{}); break;
    default:
      MGPU_FAIL(op, ": dtype ", dtype_name(dtype),
                " is not supported (use f32, f64, f16 or bf16; cast integers first)");
  }
}

/// Calls f(T{}) for every dtype.
template <typename F>
void dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::f16: f(half{}); break;
    case DType::bf16: f(bfloat16{}); break;
    case DType::i32: f(std::int32_t{}); break;
    case DType::i64: f(std::int64_t{}); break;
  }
}

}  // namespace mgpu::detail

/// In a CPU/CUDA dispatcher: runs the CUDA branch, or explains that this build has none.
#ifdef MGPU_WITH_CUDA
#define MGPU_IF_CUDA(...) __VA_ARGS__
#else
#define MGPU_IF_CUDA(...) \
  MGPU_FAIL("this build of mgpu has no CUDA backend (reconfigure with -Dcuda=enabled on a machine with nvcc)")
#endif
