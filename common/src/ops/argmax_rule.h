// Private: the one comparison max_last/argmax_last use on both backends, so the CPU's
// left-to-right scan and the GPU's tree of comparisons pick the same element.
#pragma once

#include <cstdint>

#include "saturate.h"  // MGPU_OPS_HD

namespace mgpu::detail {

/// Is candidate (v, i) better than the current best (b, bi)? The larger value wins; NaN
/// counts as the largest (so max propagates NaN, as in PyTorch); on ties the smaller
/// index wins. This is a total order on (value, index), so the result does not depend on
/// the order in which elements are compared.
template <typename A>
MGPU_OPS_HD inline bool argmax_better(A v, std::int64_t i, A b, std::int64_t bi) {
  const bool v_nan = v != v;
  const bool b_nan = b != b;
  if (v_nan || b_nan) return v_nan && (!b_nan || i < bi);
  return v > b || (v == b && i < bi);
}

}  // namespace mgpu::detail
