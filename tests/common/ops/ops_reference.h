// Naive f64 references shared by the CPU tests and the GPU tests: axis sums, gemm,
// softmax cross-entropy, and the size lists they run over.
#pragma once

#include <algorithm>
#include <cmath>

#include "ops_test_util.h"

namespace opstest {

// x viewed as [outer, n, inner]; returns sums over the middle axis (and the sums of |x|).
inline void axis_reference(const std::vector<double>& x, const Shape& s, int axis,
                           std::vector<double>& sums, std::vector<double>& abs_sums) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const std::int64_t n = s[axis];
  sums.assign(outer * inner, 0.0);
  abs_sums.assign(outer * inner, 0.0);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t k = 0; k < inner; ++k) {
        sums[o * inner + k] += x[(o * n + j) * inner + k];
        abs_sums[o * inner + k] += std::fabs(x[(o * n + j) * inner + k]);
      }
}

struct Gemm {
  std::int64_t m, n, k;
};

inline const std::vector<Gemm>& gemm_sizes() {
  static const std::vector<Gemm> g = {{1, 1, 1}, {7, 5, 3},  {33, 17, 65}, {0, 3, 4},
                                      {3, 0, 4}, {3, 4, 0},  {64, 128, 96}, {1, 300, 257}};
  return g;
}

// Reference: C = op(A) op(B) in f64, and the scale sum_k |op(A)_ik| |op(B)_kj| its
// rounding errors are proportional to.
inline void gemm_reference(const Tensor& a, const Tensor& b, bool ta, bool tb, const Gemm& g,
                           std::vector<double>& c, std::vector<double>& scale) {
  const auto va = values(a), vb = values(b);
  c.assign(g.m * g.n, 0.0);
  scale.assign(g.m * g.n, 0.0);
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < g.n; ++j)
      for (std::int64_t p = 0; p < g.k; ++p) {
        const double x = ta ? va[p * g.m + i] : va[i * g.k + p];
        const double y = tb ? vb[j * g.k + p] : vb[p * g.n + j];
        c[i * g.n + j] += x * y;
        scale[i * g.n + j] += std::fabs(x * y);
      }
}

// Rounding bound: K roundings of the accumulator (f32 for 16-bit), one to the output.
inline double gemm_rtol(DType t, std::int64_t k) {
  const double acc = unit_roundoff(t == DType::f64 ? DType::f64 : DType::f32);
  return (static_cast<double>(k) + 2) * acc + unit_roundoff(t);
}

/// Labels in [0, classes) (uniform_ on f64, then truncated), in i32 or i64.
inline Tensor random_labels(std::int64_t rows, std::int64_t classes, DType t) {
  Tensor u = random_tensor({rows}, DType::f64, 0.0, static_cast<double>(classes));
  return cast(u, t);
}

// Mean loss and probabilities in f64, with the max subtracted for stability.
inline double xent_reference(const std::vector<double>& x, const std::vector<double>& y,
                             std::int64_t rows, std::int64_t classes, std::vector<double>& probs) {
  probs.assign(x.size(), 0.0);
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (std::int64_t c = 0; c < classes; ++c) m = std::max(m, x[r * classes + c]);
    for (std::int64_t c = 0; c < classes; ++c) s += std::exp(x[r * classes + c] - m);
    for (std::int64_t c = 0; c < classes; ++c) probs[r * classes + c] = std::exp(x[r * classes + c] - m) / s;
    total += std::log(s) + m - x[r * classes + static_cast<std::int64_t>(y[r])];
  }
  return total / static_cast<double>(rows);
}

struct XentShape {
  std::int64_t rows, classes;
};
inline const std::vector<XentShape>& xent_shapes() {
  static const std::vector<XentShape> s = {{1, 1}, {7, 10}, {33, 257}, {256, 10}, {3, 1000}, {0, 10}};
  return s;
}

}  // namespace opstest
