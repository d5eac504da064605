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
  MGPU_FAIL("TODO(task4): fit_alpha_beta is not written yet "
            "(lessons/04_collectives/alpha_beta.cpp); ", timings.size(), " timing(s), p = ", p);
  // TODO(task4) END
  return model;
}

}  // namespace mgpu::perf
