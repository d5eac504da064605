// matmul_batched: the checks, the CPU path (one 2-D product per batch entry, the entries
// shared among the threads) and the dispatch to matmul_batched.cu.
#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "parallel_for.h"
#ifdef MGPU_WITH_CUDA
#include "ops/matmul_batched_cuda.h"
#endif

namespace mgpu {
namespace {

/// Entry i of a 3-D tensor as a 2-D view.
Tensor entry(const Tensor& t, std::int64_t i) { return t.slice(i, i + 1).reshape({t.size(1), t.size(2)}); }

}  // namespace

void matmul_batched_out(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                        double alpha, double beta) {
  detail::check_gemm_operands("matmul_batched", c, a, b);
  MGPU_CHECK(a.ndim() == 3 && b.ndim() == 3 && c.ndim() == 3 && a.size(0) == b.size(0) &&
                 c.size(0) == a.size(0),
             "matmul_batched: a, b and c must be 3-D with the same first (batch) dimension, got a ",
             a.str(), ", b ", b.str(), ", c ", c.str());
  const std::int64_t batch = a.size(0);
  const std::int64_t m = trans_a ? a.size(2) : a.size(1);
  const std::int64_t k = trans_a ? a.size(1) : a.size(2);
  const std::int64_t kb = trans_b ? b.size(2) : b.size(1);
  const std::int64_t n = trans_b ? b.size(1) : b.size(2);
  MGPU_CHECK(k == kb, "matmul_batched: inner dimensions differ: a ", a.str(),
             (trans_a ? " (transposed)" : ""), " has ", k, " columns per entry, b ", b.str(),
             (trans_b ? " (transposed)" : ""), " has ", kb, " rows");
  MGPU_CHECK(c.shape() == Shape({batch, m, n}), "matmul_batched: c is ", c.str(),
             " but the products are ", shape_str({batch, m, n}));
  if (batch == 0 || m == 0 || n == 0) return;
  if (a.device().is_cuda() && k > 0) {
    MGPU_CHECK(c.dtype() == a.dtype(), "matmul_batched: c is ", c.str(), "; on CUDA it must have "
               "the operands' dtype");
    MGPU_IF_CUDA(detail::gemm_batched_cuda(c, a, b, trans_a, trans_b, batch, m, n, k, alpha, beta));
    return;
  }
  // Each entry is matmul_out's 2-D product (its checks, its 16-bit rule, k == 0 included);
  // entries are independent, so sharing them among threads never changes a bit.
  detail::parallel_for(0, batch, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      Tensor ci = entry(c, i);
      matmul_out(ci, entry(a, i), entry(b, i), trans_a, trans_b, alpha, beta);
    }
  });
}

Tensor matmul_batched(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  detail::check_compatible("matmul_batched", "a", a, "b", b);
  MGPU_CHECK(a.ndim() == 3 && b.ndim() == 3, "matmul_batched: a and b must be 3-D, got a ",
             a.str(), " and b ", b.str());
  const std::int64_t m = trans_a ? a.size(2) : a.size(1);
  const std::int64_t n = trans_b ? b.size(1) : b.size(2);
  Tensor c = Tensor::empty({a.size(0), m, n}, a.dtype(), a.device());
  matmul_batched_out(c, a, b, trans_a, trans_b, 1.0, 0.0);
  return c;
}

}  // namespace mgpu
