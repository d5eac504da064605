/// @file ops.h
/// @brief The library's ops: one API, a CPU reference and a CUDA kernel behind each.
///
/// Every op checks its operands (defined, same device, same dtype, matching shapes) and
/// throws mgpu::Error naming the op and both operands. Elementwise and reduction ops accept
/// f32, f64, f16 and bf16 (16-bit types compute in f32); fill/cast/copy accept every dtype.
/// CUDA ops are queued on the device's current stream (see stream.h) and return at once.
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu {

// ---- fill and random --------------------------------------------------------------
/// Every element set to `value` (converted to the tensor's dtype).
void fill_(Tensor& t, double value);
/// Element i <- lo + (hi - lo) * U(seed, offset + i): identical on every device.
void uniform_(Tensor& t, std::uint64_t seed, double lo = 0.0, double hi = 1.0,
              std::uint64_t offset = 0);
/// Element i <- mean + std * N(seed, offset + i) (Box-Muller on two Philox words, in f64).
void normal_(Tensor& t, std::uint64_t seed, double mean = 0.0, double std = 1.0,
             std::uint64_t offset = 0);

// ---- dtype conversion ---------------------------------------------------------------
/// A new tensor with src's values in `dtype` (round-to-nearest-even for narrowing floats).
Tensor cast(const Tensor& src, DType dtype);
/// dst <- src converted to dst's dtype; same device and numel.
void cast_(Tensor& dst, const Tensor& src);

// ---- elementwise (same shape, dtype, device) -------------------------------------------
/// a + b, elementwise, as a new tensor.
Tensor add(const Tensor& a, const Tensor& b);
/// a - b, elementwise, as a new tensor.
Tensor sub(const Tensor& a, const Tensor& b);
/// a * b, elementwise (Hadamard product), as a new tensor.
Tensor mul(const Tensor& a, const Tensor& b);
/// a += b
void add_(Tensor& a, const Tensor& b);
/// a -= b
void sub_(Tensor& a, const Tensor& b);
/// a *= b
void mul_(Tensor& a, const Tensor& b);
/// alpha * a
Tensor scale(const Tensor& a, double alpha);
/// a *= alpha
void scale_(Tensor& a, double alpha);
/// y += alpha * x (BLAS axpy)
void axpy_(Tensor& y, double alpha, const Tensor& x);
/// y[r, :] += bias for every row r of y viewed as [rows, bias.numel()] (Linear's bias).
void add_rowwise_(Tensor& y, const Tensor& bias);

// ---- activations -------------------------------------------------------------------
/// max(x, 0)
Tensor relu(const Tensor& x);
/// grad_out where x > 0, else 0 (the derivative of ReLU, taken at the forward input x).
Tensor relu_backward(const Tensor& grad_out, const Tensor& x);

// ---- reductions ---------------------------------------------------------------------------
// CUDA accumulates in f32 for 16-bit types and in the dtype otherwise; the CPU reference
// accumulates in f64 (more accurate), so compare the two with the per-dtype tolerances.
/// Sum of all elements: a one-element tensor of shape {} (f32 for 16-bit inputs).
Tensor sum(const Tensor& x);
/// Mean of all elements (NaN for an empty tensor, as in PyTorch).
Tensor mean(const Tensor& x);
/// Sum along `axis` (negative counts from the end); that dimension is removed; x's dtype.
Tensor sum(const Tensor& x, int axis);
/// Mean along `axis`; that dimension is removed; x's dtype.
Tensor mean(const Tensor& x, int axis);
/// Largest value along the last axis: [..., n] -> [...]. Throws when n == 0.
Tensor max_last(const Tensor& x);
/// Index (i64) of the largest value along the last axis; the first one on ties.
Tensor argmax_last(const Tensor& x);

// ---- matrix products -----------------------------------------------------------------
/// C = op(A) op(B) with op(X) = X or X^T. A, B 2-D. f32/f64: in their own precision;
/// f16/bf16: inputs in 16 bits, products accumulated in f32, result in the input dtype.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
/// As above with the result in `out_dtype`: a's dtype, or f32 for f16/bf16 operands (the
/// mixed-precision GEMM: 16-bit inputs, f32 accumulation, the f32 sums kept unrounded).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out_dtype);
/// C = alpha * op(A) op(B) + beta * C, into an existing C (beta = 1 accumulates gradients).
/// C has A's dtype, or is f32 when A and B are f16/bf16 (mixed precision, as above).
void matmul_out(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a = false,
                bool trans_b = false, double alpha = 1.0, double beta = 0.0);

/// Batched products: C[i] = op(A[i]) op(B[i]) for every i of the first dimension, A and B
/// 3-D with the same first dimension (attention's heads × batch). dtypes as matmul; on
/// CUDA one strided-batched cuBLAS call, on the CPU the products shared among the threads.
Tensor matmul_batched(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
/// C[i] = alpha op(A[i]) op(B[i]) + beta C[i], into an existing [batch, M, N] C.
void matmul_batched_out(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a = false,
                        bool trans_b = false, double alpha = 1.0, double beta = 0.0);

// ---- layout ---------------------------------------------------------------------------------
/// A copy of x with its dimensions reordered: dimension i of the result is dimension
/// dims[i] of x (PyTorch: x.permute(dims).contiguous()). Any dtype, at most 6 dimensions;
/// dims must list each of 0..ndim-1 once. Attention moves heads next to the batch with it.
Tensor permute(const Tensor& x, const std::vector<int>& dims);

// ---- softmax ------------------------------------------------------------------------------
/// Softmax over the last axis, stable (the row's largest value is subtracted first). With
/// `causal`, x is [..., T, T] and row t sees columns 0..t only: the others get probability
/// exactly 0 (attention's mask: a position never looks ahead).
Tensor softmax(const Tensor& x, bool causal = false);
/// dL/dx of softmax from dL/dy and y = softmax(x): y · (dL/dy − Σ_row dL/dy · y). Masked
/// entries (y = 0) get a zero gradient.
Tensor softmax_backward(const Tensor& grad_out, const Tensor& y);

// ---- loss -----------------------------------------------------------------------------
/// Who checks softmax_cross_entropy's labels against [0, C).
enum class LabelCheck {
  /// The op. On CUDA the kernel raises a flag that the host reads back: a wait for the
  /// kernel, counted as a host read (host_reads.h).
  here,
  /// The caller has, where the labels came from (a batch the host holds): on CUDA no wait.
  /// A label out of range then makes its row's loss NaN, never a read outside the logits. On
  /// the CPU the labels are checked either way (they are host memory: no wait).
  by_caller,
};
/// Fused, numerically stable softmax + cross-entropy over the last axis.
/// logits [N, C] (float dtype), labels [N] (i32 or i64, each in [0, C)).
/// Returns the mean loss over N as a {} tensor (f32, or f64 for f64 logits) and writes the
/// softmax probabilities into *probs (same dtype as logits) when probs is non-null.
/// An out-of-range label throws (checked on the host for CPU tensors, by a flag on CUDA:
/// see LabelCheck).
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* probs = nullptr,
                             LabelCheck check = LabelCheck::here);
/// d(mean loss)/d(logits) = (probs - onehot(labels)) * grad_scale / N.
Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels,
                                      double grad_scale = 1.0);

}  // namespace mgpu
