// Helpers for tests that run on the GPU: the device to use and per-dtype tolerances
// for comparing a CUDA result with the CPU reference computed in the same test.
#pragma once

#include "mgpu/dtype.h"

namespace mgpu::testing {

/// Relative tolerance for CUDA-vs-CPU comparisons of results in `t`.
inline double gpu_rtol(DType t) {
  switch (t) {
    case DType::f64: return 1e-12;
    case DType::f32: return 1e-5;
    case DType::f16: return 2e-3;   // 10-bit mantissa: one ulp is ~1e-3
    case DType::bf16: return 1.6e-2;  // 7-bit mantissa: one ulp is ~8e-3
    default: return 0;
  }
}

}  // namespace mgpu::testing
