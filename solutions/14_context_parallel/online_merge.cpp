// Task 1: the online softmax's merge. Two partial attention results of the same queries
// over two disjoint sets of keys become the result over their union, without seeing the
// keys again: each carries the log of its softmax denominator, which is enough to rescale.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mgpu/parallel/cp/ring_attention.h"

namespace mgpu::parallel::cp {

void merge_partial(PartialAttention& acc, const PartialAttention& part) {
  check_same_shape("merge_partial", acc.out, part.out);
  check_same_shape("merge_partial", acc.lse, part.lse);
  MGPU_CHECK(acc.out.dtype() == DType::f64 && part.out.dtype() == DType::f64 &&
                 acc.lse.dtype() == DType::f64 && part.lse.dtype() == DType::f64,
             "merge_partial: partial results are f64, got ", acc.out.str(), " and ",
             part.out.str());
  const std::int64_t rows = acc.lse.numel(), D = acc.out.numel() / std::max<std::int64_t>(rows, 1);
  // What you have: rows (BH·Tq query rows), D; acc.out.data<double>() and
  // acc.lse.data<double>() (acc's out [rows, D] and lse [rows], written in place);
  // part.out.data<double>(), part.lse.data<double>() (read only); std::exp, std::log,
  // std::max; -inf is std::numeric_limits<double>::infinity() negated.
  // TODO(task1) BEGIN: chapter §2's merge: for each row, acc becomes the (out, lse) of the
  // union of its keys and part's, as if attention had seen them all at once (the merged
  // lse equals the union's). Invariants: a side with lse = -inf (no key seen) changes
  // nothing, and both sides -inf stay -inf with out 0 (no NaN); no exp of a positive
  // number (scores of 1e4 stay finite); merging in any order and any grouping gives the
  // same result up to rounding. Stuck: tools/hint 14 1 (about 12 lines).
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  double* o = acc.out.data<double>();
  double* l = acc.lse.data<double>();
  const double* o2 = part.out.data<double>();
  const double* l2 = part.lse.data<double>();
  for (std::int64_t i = 0; i < rows; ++i) {
    const double la = l[i], lb = l2[i];
    if (lb == kNegInf) continue;  // part saw no key of this row
    const double m = std::max(la, lb);
    const double wa = la == kNegInf ? 0.0 : std::exp(la - m), wb = std::exp(lb - m);
    const double lse = m + std::log(wa + wb);
    const double ca = wa / (wa + wb), cb = wb / (wa + wb);
    for (std::int64_t d = 0; d < D; ++d) o[i * D + d] = ca * o[i * D + d] + cb * o2[i * D + d];
    l[i] = lse;
  }
  // TODO(task1) END
}

}  // namespace mgpu::parallel::cp
