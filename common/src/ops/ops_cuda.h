// Private: the CUDA halves of the ops. The .cpp dispatchers have already checked the
// operands and handled empty tensors, so every function here gets defined, matching,
// non-empty operands on one CUDA device. Each is defined in the .cu file beside its CPU
// twin and queues its kernels on detail::launch_stream(device) without waiting.
// Only called where MGPU_WITH_CUDA is defined (via MGPU_IF_CUDA).
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::detail {

// fill_random.cu
/// Every element <- the bit pattern `bits` (the value already converted to t's dtype).
void fill_bits_cuda(Tensor& t, std::uint64_t bits);
void uniform_cuda(Tensor& t, std::uint64_t seed, double lo, double hi, std::uint64_t offset);
void normal_cuda(Tensor& t, std::uint64_t seed, double mean, double stddev, std::uint64_t offset);

// cast.cu
/// dst <- src converted to dst's dtype (same numel, any two dtypes).
void cast_cuda(Tensor& dst, const Tensor& src);

// elementwise.cu
enum class BinaryOp { add, sub, mul };
/// out <- a op b (out may be a itself, for the in-place forms).
void binary_cuda(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b);
/// out <- alpha * a (out may be a).
void scale_cuda(Tensor& out, const Tensor& a, double alpha);
/// y <- y + alpha * x.
void axpy_cuda(Tensor& y, double alpha, const Tensor& x);
/// y[r, j] += bias[j] with y viewed as [y.numel() / bias.numel(), bias.numel()].
void add_rowwise_cuda(Tensor& y, const Tensor& bias);
void relu_cuda(Tensor& out, const Tensor& x);
void relu_backward_cuda(Tensor& grad_in, const Tensor& grad_out, const Tensor& x);

// reductions.cu
/// out ({} tensor, f32 or f64) <- sum (or mean) of all elements of x.
void sum_all_cuda(Tensor& out, const Tensor& x, bool mean);
/// x viewed as [outer, n, inner]; out[o, k] <- sum (or mean) over j of x[o, j, k].
void sum_axis_cuda(Tensor& out, const Tensor& x, std::int64_t outer, std::int64_t n,
                   std::int64_t inner, bool mean);
/// x viewed as [rows, n] (n >= 1); writes the row maxima into *max_out and/or their first
/// indices (i64) into *argmax_out (either may be null).
void max_last_cuda(Tensor* max_out, Tensor* argmax_out, const Tensor& x, std::int64_t rows,
                   std::int64_t n);

// matmul.cu
/// c[M, N] <- alpha * op(a) op(b) + beta * c with cuBLAS (M, N, K >= 1); c is a's dtype,
/// or f32 for f16/bf16 a and b.
void gemm_cuda(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
               std::int64_t m, std::int64_t n, std::int64_t k, double alpha, double beta);

// softmax_xent.cu
/// row_loss[r] <- -log softmax(logits[r])[labels[r]] (f32, or f64 for f64 logits) and,
/// if probs is non-null, probs <- softmax(logits). Throws after the kernel if a label was
/// out of range (this waits for the stream).
void softmax_xent_rows_cuda(Tensor& row_loss, Tensor* probs, const Tensor& logits,
                            const Tensor& labels, bool check_labels);
/// grad <- (probs - onehot(labels)) * scale.
void softmax_xent_backward_cuda(Tensor& grad, const Tensor& probs, const Tensor& labels,
                                double scale);

}  // namespace mgpu::detail
