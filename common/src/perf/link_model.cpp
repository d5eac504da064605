// The ring all-reduce's and the pairwise all-to-all's times in the alpha-beta model: 2(p-1)
// and p-1 messages of n/p bytes each.
#include "mgpu/perf/link_model.h"

namespace mgpu::perf {

double ring_allreduce_seconds(const AlphaBeta& m, double bytes, int p) {
  return 2.0 * (p - 1) * m.alpha + 2.0 * (p - 1) / p * bytes * m.beta;
}

double alltoall_seconds(const AlphaBeta& m, double bytes, int p) {
  if (p <= 1) return 0;
  return (p - 1) * m.alpha + static_cast<double>(p - 1) / p * bytes * m.beta;
}

}  // namespace mgpu::perf
