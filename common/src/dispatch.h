// Private helpers shared by the op implementations: dtype dispatch on the CPU, element
// conversions, and the guard that routes CUDA tensors to their kernels.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mgpu/dtype.h"
#include "mgpu/error.h"
#include "mgpu/tensor.h"

namespace mgpu::detail {

// ---- the compute type -----------------------------------------------------------------
// A 16-bit value is stored in 16 bits but computed in float: read it with to_compute, do
// the arithmetic in compute_t<T>, write the result back once with from_compute<T>.
// ops/cuda_util.cuh adds the CUDA element types (__half, __nv_bfloat16) to the same names.
// Why "compute" and not "acc": accumulating is one use of this type, not its meaning (the
// CPU sums accumulate even float in double), and PyTorch's acc_type is that other rule;
// PyTorch calls this one opmath_type.
// The float/double overloads are constexpr so that kernels can call them too (nvcc runs
// with --expt-relaxed-constexpr).

/// The type arithmetic on a T is done in: float for the 16-bit types, T itself otherwise.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<half> { using type = float; };
template <> struct compute_type<bfloat16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

/// Reads a stored element as its compute type (exact: float holds every 16-bit value).
inline float to_compute(half h) { return half_to_float(h); }
inline float to_compute(bfloat16 b) { return bf16_to_float(b); }
constexpr float to_compute(float f) { return f; }
constexpr double to_compute(double d) { return d; }

/// Writes a computed value back in the storage type (rounding to nearest even).
template <typename T> constexpr T from_compute(compute_t<T> v) { return static_cast<T>(v); }
template <> inline half from_compute<half>(float v) { return float_to_half(v); }
template <> inline bfloat16 from_compute<bfloat16>(float v) { return float_to_bf16(v); }

/// Calls f(T{}) with T the type of a floating `dtype`, the 16-bit ones as Half and BF16
/// (mgpu::half and mgpu::bfloat16 on the host, __half and __nv_bfloat16 for kernels: see
/// ops/cuda_util.cuh); any other dtype throws "<op>: dtype <name><unsupported>".
template <typename Half, typename BF16, typename F>
void dispatch_floating_as(DType dtype, const char* op, const char* unsupported, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::f16: f(Half{}); break;
    case DType::bf16: f(BF16{}); break;
    default: MGPU_FAIL(op, ": dtype ", dtype_name(dtype), unsupported);
  }
}

/// Calls f(T{}) for every dtype, the 16-bit floating ones as Half and BF16.
template <typename Half, typename BF16, typename F>
void dispatch_all_as(DType dtype, F&& f) {
  switch (dtype) {
    case DType::i32: f(std::int32_t{}); break;
    case DType::i64: f(std::int64_t{}); break;
    default: dispatch_floating_as<Half, BF16>(dtype, "dispatch_all", "", f);
  }
}

/// Calls f(T{}) with T the C++ type of `dtype`, for the four floating dtypes.
template <typename F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  dispatch_floating_as<half, bfloat16>(
      dtype, op, " is not supported (use f32, f64, f16 or bf16; cast integers first)", f);
}

/// Calls f(T{}) for every dtype.
template <typename F>
void dispatch_all(DType dtype, F&& f) {
  dispatch_all_as<half, bfloat16>(dtype, f);
}

}  // namespace mgpu::detail

namespace mgpu::detail {

/// The CPU/CUDA routing of an op on `x`: cuda() when x lives on a CUDA device (its body
/// wrapped in MGPU_IF_CUDA), else cpu(T{}) with T the C++ type of x's floating dtype.
template <typename Cuda, typename Cpu>
void cpu_or_cuda(const Tensor& x, const char* op, Cuda cuda, Cpu cpu) {
  if (x.device().is_cuda()) {
    cuda();
    return;
  }
  dispatch_floating(x.dtype(), op, cpu);
}

}  // namespace mgpu::detail

/// In a CPU/CUDA dispatcher: runs the CUDA branch, or explains that this build has none.
#ifdef MGPU_WITH_CUDA
#define MGPU_IF_CUDA(...) __VA_ARGS__
#else
#define MGPU_IF_CUDA(...) \
  MGPU_FAIL("this build of mgpu has no CUDA backend (reconfigure with -Dcuda=enabled on a machine with nvcc)")
#endif
