// Lesson 04, task 4: fit the alpha-beta model to measured all-reduce times
// (mgpu/perf/link_model.h).
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
#include "mgpu/error.h"
#include "mgpu/perf/link_model.h"

namespace mgpu::perf {

AlphaBeta fit_alpha_beta(const std::vector<AllReduceTiming>& timings, int p) {
  MGPU_CHECK(p >= 2, "fit_alpha_beta: p = ", p, ": one rank sends no messages, so there is "
             "nothing to fit (measure with 2 ranks or more)");
  AlphaBeta model;
  // What you have: each AllReduceTiming's bytes and seconds; MGPU_CHECK(condition,
  // message...) throws mgpu::Error; p; the relation between a line's a, b and alpha, beta
  // (file comment above).
  // TODO(task4) BEGIN: model.alpha and model.beta of the line T = a + b·n fitted to the
  // timings by least squares weighted with 1 / T_i², i.e. on relative error (chapter §4
  // derives the normal equations, their solution, and when there is none). Exact timings
  // give alpha and beta back; ±3 % noise still gives both within a few percent. A time that
  // is not positive, or fewer than two distinct sizes (no single line fits), is an
  // mgpu::Error that says so. Stuck: tools/hint 04 4 (about 15 lines).
  double S = 0, Sx = 0, Sy = 0, Sxx = 0, Sxy = 0;
  for (const AllReduceTiming& t : timings) {
    MGPU_CHECK(t.seconds > 0, "fit_alpha_beta: a time of ", t.seconds, " s for ", t.bytes,
               " bytes; every time must be positive");
    const double w = 1.0 / (t.seconds * t.seconds);
    S += w;
    Sx += w * t.bytes;
    Sy += w * t.seconds;
    Sxx += w * t.bytes * t.bytes;
    Sxy += w * t.bytes * t.seconds;
  }
  const double det = S * Sxx - Sx * Sx;
  MGPU_CHECK(timings.size() >= 2 && det > 1e-12 * S * Sxx, "fit_alpha_beta: ", timings.size(),
             " timing(s) with fewer than two distinct sizes; a line needs two");
  const double b = (S * Sxy - Sx * Sy) / det;
  const double a = (Sy - b * Sx) / S;
  model.alpha = a / (2.0 * (p - 1));
  model.beta = b * p / (2.0 * (p - 1));
  // TODO(task4) END
  return model;
}

}  // namespace mgpu::perf
