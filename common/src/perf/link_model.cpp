// The ring all-reduce's time in the alpha-beta model: 2(p-1) messages of n/p bytes each.
#include "mgpu/perf/link_model.h"

namespace mgpu::perf {

double ring_allreduce_seconds(const AlphaBeta& m, double bytes, int p) {
  return 2.0 * (p - 1) * m.alpha + 2.0 * (p - 1) / p * bytes * m.beta;
}

}  // namespace mgpu::perf
