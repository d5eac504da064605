// Lesson 04, task 4: fit the alpha-beta model to measured all-reduce times.
//
// The ring all-reduce of n bytes on p ranks sends 2(p-1) messages of n/p bytes one after
// another, so the model predicts T(n) = 2(p-1) alpha + 2(p-1)/p n beta: a straight line
// T = a + b n with intercept a = 2(p-1) alpha and slope b = 2(p-1)/p beta. Fitting that
// line to (n_i, T_i) gives alpha and beta.
//
// Plain least squares would let the largest sizes decide everything: a 1% wobble at
// 256 MiB is more seconds than the whole latency term. Weighting each point by 1/T_i^2
// fits the *relative* error instead, so small sizes (which see alpha) count as much as
// large ones (which see beta).
#include "collectives.h"

namespace mgpu::lesson04 {

AlphaBeta fit_alpha_beta(const std::vector<Timing>& timings, int p) {
  MGPU_CHECK(p >= 2, "fit_alpha_beta: p = ", p, ": one rank sends no messages, so there is "
             "nothing to fit (measure with 2 ranks or more)");
  AlphaBeta model;
  // TODO(task4) BEGIN: weighted least squares for T = a + b n with weights w_i = 1 / T_i^2:
  // accumulate S = sum w, Sx = sum w n, Sy = sum w T, Sxx = sum w n^2, Sxy = sum w n T;
  // det = S Sxx - Sx^2 (throw mgpu::Error if it is ~0: fewer than two distinct sizes, e.g.
  // det <= 1e-12 * S * Sxx); b = (S Sxy - Sx Sy) / det, a = (Sy - b Sx) / S; then
  // model.alpha = a / (2(p-1)), model.beta = b p / (2(p-1)). (about 15 lines)
  (void)timings;
  throw Error("TODO(task4): fit_alpha_beta is not written yet (lessons/04_collectives/alpha_beta.cpp)");
  // TODO(task4) END
  return model;
}

}  // namespace mgpu::lesson04
