// Lesson 04, task 4: the alpha-beta fit recovers known parameters from synthetic timings.
#include <catch2/catch.hpp>

#include <cmath>

#include "mgpu/error.h"
#include "mgpu/perf/link_model.h"

using namespace mgpu;
using namespace mgpu::perf;

namespace {

// Sizes as the benchmark measures them: 1 KiB .. 256 MiB, doubling.
std::vector<AllReduceTiming> synthetic(const AlphaBeta& truth, int p, double noise) {
  std::vector<AllReduceTiming> t;
  int k = 0;
  for (double bytes = 1024; bytes <= 256.0 * 1024 * 1024; bytes *= 2, ++k) {
    // Deterministic "noise": a few percent up or down, different at every size.
    double wobble = 1.0 + noise * std::sin(1.7 * k + 0.3);
    t.push_back({bytes, ring_allreduce_seconds(truth, bytes, p) * wobble});
  }
  return t;
}

}  // namespace

TEST_CASE("fit_alpha_beta recovers alpha and beta from exact timings", "[04_collectives][task4][points:1]") {
  for (int p : {2, 3, 4, 8}) {
    CAPTURE(p);
    AlphaBeta truth{25e-6, 1.0 / 6e9};  // 25 us per message, 6 GB/s
    AlphaBeta fit = fit_alpha_beta(synthetic(truth, p, 0.0), p);
    CHECK(fit.alpha == Approx(truth.alpha).epsilon(1e-6));
    CHECK(fit.beta == Approx(truth.beta).epsilon(1e-6));
  }
}

TEST_CASE("fit_alpha_beta weighs relative error: noisy timings still give both parameters",
          "[04_collectives][task4][points:2]") {
  // With 3% noise, plain least squares is dominated by the largest sizes and misses alpha
  // by far; a relative-error fit gets both within a few percent.
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    AlphaBeta truth{8e-6, 1.0 / 20e9};
    AlphaBeta fit = fit_alpha_beta(synthetic(truth, p, 0.03), p);
    CHECK(fit.alpha == Approx(truth.alpha).epsilon(0.10));
    CHECK(fit.beta == Approx(truth.beta).epsilon(0.05));
    CHECK(fit.bandwidth_gbs() == Approx(20.0).epsilon(0.05));
  }
}

TEST_CASE("fit_alpha_beta refuses what it cannot fit", "[04_collectives][task4][points:1]") {
  std::vector<AllReduceTiming> one_size{{4096, 1e-4}, {4096, 1.1e-4}, {4096, 0.9e-4}};
  CHECK_THROWS_AS(fit_alpha_beta(one_size, 4), Error);
  CHECK_THROWS_AS(fit_alpha_beta({}, 4), Error);
  CHECK_THROWS_AS(fit_alpha_beta({{1024, 1e-5}, {2048, 2e-5}}, 1), Error);
  // Two distinct sizes are enough for a line.
  AlphaBeta fit = fit_alpha_beta({{1000, 3e-5}, {2000, 4e-5}}, 2);
  CHECK(fit.alpha == Approx(1e-5));  // a = 2e-5 = 2(p-1) alpha
  CHECK(fit.beta == Approx(1e-8));   // b = 1e-8 = 2(p-1)/p beta
}
