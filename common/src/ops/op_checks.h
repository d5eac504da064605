// Private: operand checks shared by the ops. Each message names the op and both operands
// (Tensor::str(): dtype, shape and device), so a mismatch deep inside a training step says
// exactly which call went wrong.
#pragma once

#include <cstdint>

#include "mgpu/error.h"
#include "mgpu/tensor.h"

namespace mgpu::detail {

inline void check_defined_operand(const char* op, const char* name, const Tensor& t) {
  MGPU_CHECK(t.defined(), op, ": operand ", name,
             " is undefined (a default-constructed Tensor; create it with Tensor::empty/zeros)");
}

/// Both defined, on the same device, of the same dtype (shapes may differ).
inline void check_compatible(const char* op, const char* name_a, const Tensor& a,
                             const char* name_b, const Tensor& b) {
  check_defined_operand(op, name_a, a);
  check_defined_operand(op, name_b, b);
  MGPU_CHECK(a.device() == b.device(), op, ": device mismatch: ", name_a, " is ", a.str(), ", ",
             name_b, " is ", b.str(), " (move one with .to(device))");
  MGPU_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", name_a, " is ", a.str(), ", ",
             name_b, " is ", b.str(), " (convert one with .to(dtype) or cast())");
}

/// As check_compatible, and the same shape.
inline void check_same_layout(const char* op, const char* name_a, const Tensor& a,
                              const char* name_b, const Tensor& b) {
  check_compatible(op, name_a, a, name_b, b);
  MGPU_CHECK(a.shape() == b.shape(), op, ": shape mismatch: ", name_a, " is ", a.str(), ", ",
             name_b, " is ", b.str());
}

/// Throws unless the dtype is one of the four floating types.
inline void check_floating(const char* op, const char* name, const Tensor& t) {
  check_defined_operand(op, name, t);
  MGPU_CHECK(is_floating(t.dtype()), op, ": operand ", name, " is ", t.str(),
             " but the op needs f32, f64, f16 or bf16 (cast integers first)");
}

/// The operand checks every GEMM (matmul, matmul_batched) starts with: a and b defined,
/// alike and floating; c defined.
inline void check_gemm_operands(const char* op, const Tensor& c, const Tensor& a, const Tensor& b) {
  check_compatible(op, "a", a, "b", b);
  check_floating(op, "a", a);
  check_defined_operand(op, "c", c);
}

/// The dtype reductions and the loss return for inputs of `t`: f64 stays f64, the rest f32.
inline DType accumulate_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

}  // namespace mgpu::detail
