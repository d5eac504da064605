// matmul / matmul_out: shape checks, the CBLAS calls on the CPU, dispatch to matmul.cu.
// Everything is row-major: A is [M, K] (or [K, M] when trans_a), B is [K, N] (or [N, K]
// when trans_b), C is [M, N].
//
// On the CPU a large product is cut into blocks of C's rows (or columns, when C is wide
// and short), one single-threaded BLAS call per block, and the blocks are shared among the
// library's threads like any other loop. The cut depends on the shapes alone, never on the
// thread count, so neither do the results. One pool of threads for every op, instead of
// OpenBLAS's own beside ours: OpenBLAS's idle threads spin (sched_yield) for a while after
// each product and took a core from the loops that ran between the products.
#include <algorithm>
#include <vector>

#include <cblas.h>

#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "ops_cuda.h"
#include "parallel_for.h"

namespace mgpu {
namespace {

// The leading dimension of a row-major matrix is its row length (shape[1]); BLAS wants
// it >= 1 even when the matrix is empty.
// True when the two tensors' elements overlap in memory (C must not overlap A or B:
// BLAS would read inputs it has already overwritten).
bool overlaps(const Tensor& x, const Tensor& y) {
  return x.shares_storage(y) && x.offset() < y.offset() + y.numel() &&
         y.offset() < x.offset() + x.numel();
}

int leading_dim(const Tensor& t) { return static_cast<int>(std::max<std::int64_t>(1, t.size(1))); }

template <typename T>
std::vector<float> to_float(const Tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  const T* p = t.data<T>();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = detail::to_compute(p[i]);
  return out;
}

// A block's multiply-adds (about a tenth of a millisecond on one core): below twice this a
// product is one call on the calling thread. Handing a block to another thread costs a
// microsecond when it is spinning, tens of microseconds when it has gone to sleep.
constexpr std::int64_t kBlockWork = std::int64_t{1} << 22;
// Rows (or columns) per block at least: every block packs the whole other operand for the
// BLAS kernel again, which costs about as much as multiplying it by a few dozen rows.
constexpr std::int64_t kMinBlockExtent = 128;
// At most this many blocks: enough to share among a laptop's cores.
constexpr std::int64_t kMaxBlocks = 8;

// How many blocks a product of `work` multiply-adds over `extent` rows (or columns) is cut
// into: 1, 2, 4 or 8, so that 2, 4 or 8 threads get equal shares (7 blocks on 2 threads
// would leave one thread a block behind), and each block keeps at least kMinBlockExtent
// rows and kBlockWork multiply-adds.
std::int64_t gemm_block_count(std::int64_t extent, std::int64_t work) {
  const std::int64_t most = std::min({kMaxBlocks, extent / kMinBlockExtent, work / kBlockWork});
  std::int64_t count = 1;
  while (count * 2 <= most) count *= 2;
  return count;
}

/// C = alpha op(A) op(B) + beta C by blocks of C's rows or columns, one BLAS call each.
template <typename T, typename Gemm>
void gemm_blocks(Gemm gemm, CBLAS_TRANSPOSE op_a, CBLAS_TRANSPOSE op_b, int m, int n, int k,
                 T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  const bool by_rows = m >= n;
  const std::int64_t extent = by_rows ? m : n;
  const std::int64_t work = std::int64_t{m} * n * k;
  const std::int64_t block =
      std::max<std::int64_t>(1, detail::num_blocks(extent, gemm_block_count(extent, work)));
  detail::parallel_for(0, detail::num_blocks(extent, block), 1, [=](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const int lo = static_cast<int>(i * block);
      const int len = static_cast<int>(std::min(extent, (i + 1) * block)) - lo;
      if (by_rows) {  // rows lo.. of C and of op(A): A's rows, or A's columns when transposed
        const T* a_block = op_a == CblasNoTrans ? a + std::int64_t{lo} * lda : a + lo;
        gemm(CblasRowMajor, op_a, op_b, len, n, k, alpha, a_block, lda, b, ldb, beta,
             c + std::int64_t{lo} * ldc, ldc);
      } else {  // columns lo.. of C and of op(B): B's columns, or B's rows when transposed
        const T* b_block = op_b == CblasNoTrans ? b + lo : b + std::int64_t{lo} * ldb;
        gemm(CblasRowMajor, op_a, op_b, m, len, k, alpha, a, lda, b_block, ldb, beta, c + lo, ldc);
      }
    }
  });
}

void gemm_cpu(Tensor& c, const Tensor& a, const Tensor& b, bool ta, bool tb, int m, int n, int k,
              double alpha, double beta) {
  detail::blas_single_threaded();
  const CBLAS_TRANSPOSE op_a = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE op_b = tb ? CblasTrans : CblasNoTrans;
  const int lda = leading_dim(a), ldb = leading_dim(b), ldc = n;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  switch (a.dtype()) {
    case DType::f32:
      gemm_blocks(cblas_sgemm, op_a, op_b, m, n, k, alpha_f, a.data<float>(), lda, b.data<float>(),
                  ldb, beta_f, c.data<float>(), ldc);
      break;
    case DType::f64:
      gemm_blocks(cblas_dgemm, op_a, op_b, m, n, k, alpha, a.data<double>(), lda,
                  b.data<double>(), ldb, beta, c.data<double>(), ldc);
      break;
    default:
      // f16/bf16: BLAS has no 16-bit gemm, so widen to float (exact), multiply and
      // accumulate in float, and round the result once, like cuBLAS with COMPUTE_32F.
      detail::dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
        using T = decltype(tag);
        const std::vector<float> af = to_float<T>(a), bf = to_float<T>(b);
        if (c.dtype() == DType::f32) {
          // Mixed precision: 16-bit operands, the float result kept as it is (no rounding
          // to 16 bits), accumulated straight into C when beta = 1.
          gemm_blocks(cblas_sgemm, op_a, op_b, m, n, k, alpha_f, af.data(), lda, bf.data(), ldb,
                      beta_f, c.data<float>(), ldc);
          return;
        }
        // beta == 0 means "ignore C" (it may hold garbage or NaN), as in BLAS.
        std::vector<float> cf = beta != 0 ? to_float<T>(c)
                                          : std::vector<float>(static_cast<std::size_t>(c.numel()));
        gemm_blocks(cblas_sgemm, op_a, op_b, m, n, k, alpha_f, af.data(), lda, bf.data(), ldb,
                    beta_f, cf.data(), ldc);
        T* pc = c.data<T>();
        for (std::size_t i = 0; i < cf.size(); ++i) pc[i] = detail::from_compute<T>(cf[i]);
      });
  }
}

}  // namespace

void matmul_out(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                double alpha, double beta) {
  detail::check_gemm_operands("matmul", c, a, b);
  if (c.dtype() == DType::f32 && (a.dtype() == DType::f16 || a.dtype() == DType::bf16)) {
    // The mixed-precision GEMM: 16-bit a and b, f32 c (see ops.h).
    MGPU_CHECK(c.device() == a.device(), "matmul: device mismatch: c is ", c.str(), ", a is ",
               a.str(), " (move one with .to(device))");
  } else {
    detail::check_compatible("matmul", "c", c, "a", a);
  }
  MGPU_CHECK(a.ndim() == 2 && b.ndim() == 2, "matmul: a and b must be 2-D, got a ", a.str(),
             " and b ", b.str());
  const std::int64_t m = trans_a ? a.size(1) : a.size(0);
  const std::int64_t k = trans_a ? a.size(0) : a.size(1);
  const std::int64_t kb = trans_b ? b.size(1) : b.size(0);
  const std::int64_t n = trans_b ? b.size(0) : b.size(1);
  MGPU_CHECK(k == kb, "matmul: inner dimensions differ: a ", a.str(), (trans_a ? " (transposed)" : ""),
             " has ", k, " columns, b ", b.str(), (trans_b ? " (transposed)" : ""), " has ", kb,
             " rows");
  MGPU_CHECK(c.shape() == Shape({m, n}), "matmul: c is ", c.str(), " but op(a) op(b) is ",
             shape_str({m, n}), " (a ", a.str(), ", b ", b.str(), ")");
  MGPU_CHECK(!overlaps(c, a) && !overlaps(c, b), "matmul: the output c ", c.str(),
             " overlaps an input (a ", a.str(), ", b ", b.str(), "); write into a separate tensor");
  const std::int64_t int_max = 2147483647;
  MGPU_CHECK(m <= int_max && n <= int_max && k <= int_max && a.size(1) <= int_max &&
                 b.size(1) <= int_max,
             "matmul: dimensions of a ", a.str(), " and b ", b.str(),
             " exceed the 32-bit sizes BLAS takes");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // An empty inner product is 0, so C = beta * C (and exactly 0 when beta == 0).
    if (beta == 0) {
      fill_(c, 0.0);
    } else {
      scale_(c, beta);
    }
    return;
  }
  if (a.device().is_cuda()) {
    MGPU_IF_CUDA(detail::gemm_cuda(c, a, b, trans_a, trans_b, m, n, k, alpha, beta));
    return;
  }
  gemm_cpu(c, a, b, trans_a, trans_b, static_cast<int>(m), static_cast<int>(n),
           static_cast<int>(k), alpha, beta);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  detail::check_defined_operand("matmul", "a", a);
  return matmul(a, b, trans_a, trans_b, a.dtype());
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out_dtype) {
  detail::check_compatible("matmul", "a", a, "b", b);
  MGPU_CHECK(a.ndim() == 2 && b.ndim() == 2, "matmul: a and b must be 2-D, got a ", a.str(),
             " and b ", b.str());
  MGPU_CHECK(out_dtype == a.dtype() ||
                 (out_dtype == DType::f32 && (a.dtype() == DType::f16 || a.dtype() == DType::bf16)),
             "matmul: cannot write a product of ", a.str(), " and ", b.str(), " as ",
             dtype_name(out_dtype), " (the result is the operands' dtype, or f32 for f16/bf16 "
             "operands)");
  const std::int64_t m = trans_a ? a.size(1) : a.size(0);
  const std::int64_t n = trans_b ? b.size(0) : b.size(1);
  Tensor c = Tensor::empty({m, n}, out_dtype, a.device());
  matmul_out(c, a, b, trans_a, trans_b, 1.0, 0.0);
  return c;
}

}  // namespace mgpu
