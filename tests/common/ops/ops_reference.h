// Naive f64 references shared by the CPU tests and the GPU tests: axis sums, gemm,
// softmax cross-entropy, and the size lists they run over.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

/// One sum/mean case: x, random in dtype t and shape s, reduced along axis (negative
/// counts from the back; a is the same axis counted from the front), with the f64
/// reference sums `want`, the sums of |x| `scale`, and a name for messages.
struct AxisCase {
  DType t;
  Shape s;
  int axis, a;
  Tensor x;
  std::vector<double> want, scale;
  std::string what;
};

/// Calls f(AxisCase&) for every float dtype, shape and axis the sum/mean tests cover.
template <class F>
void for_each_axis_case(F&& f) {
  const std::vector<Shape> shapes = {{0, 5}, {5, 0}, {1, 1}, {7, 13}, {3, 257, 5}, {2, 1, 3},
                                     {1000, 3}, {4, 1 << 18}};
  for (DType t : float_dtypes())
    for (const Shape& s : shapes)
      for (int axis = -static_cast<int>(s.size()); axis < static_cast<int>(s.size()); ++axis) {
        AxisCase c{t, s, axis, axis < 0 ? axis + static_cast<int>(s.size()) : axis, {}, {}, {}, {}};
        c.x = random_tensor(s, t);
        axis_reference(values(c.x), s, c.a, c.want, c.scale);
        c.what = name(t) + mgpu::shape_str(s) + " axis " + std::to_string(axis);
        f(c);
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

/// One matmul case: op(A) op(B) of size g in dtype t, with the transposes ta and tb, the
/// f64 reference `want`, the scale of its rounding errors, and a name for messages.
struct GemmCase {
  DType t;
  Gemm g;
  bool ta, tb;
  Tensor a, b;
  std::vector<double> want, scale;
  std::string what;
};

/// Calls f(GemmCase&) for every float dtype, size of gemm_sizes() and transpose combination.
template <class F>
void for_each_gemm_case(F&& f) {
  for (DType t : float_dtypes())
    for (const Gemm& g : gemm_sizes())
      for (int combo = 0; combo < 4; ++combo) {
        const bool ta = combo & 1, tb = combo & 2;
        GemmCase c{t, g, ta, tb, {}, {}, {}, {}, {}};
        c.a = random_tensor(ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, t);
        c.b = random_tensor(tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, t);
        gemm_reference(c.a, c.b, ta, tb, g, c.want, c.scale);
        c.what = "matmul " + name(t) + " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                 std::to_string(g.k) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
        f(c);
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

/// One softmax cross-entropy case: logits in [-8, 8) of dtype t and labels of dtype label_t,
/// of size s, and a name for messages.
struct XentCase {
  DType t, label_t;
  XentShape s;
  Tensor logits, labels;
  std::string what;
};

/// Calls f(XentCase&) for every float dtype, label dtype and size of xent_shapes().
template <class F>
void for_each_xent_case(F&& f) {
  for (DType t : float_dtypes())
    for (DType label_t : {DType::i32, DType::i64})
      for (const XentShape& s : xent_shapes()) {
        XentCase c{t, label_t, s, random_tensor({s.rows, s.classes}, t, -8.0, 8.0), {}, {}};
        c.labels = random_labels(s.rows, s.classes, label_t);
        c.what = name(t) + "[" + std::to_string(s.rows) + ", " + std::to_string(s.classes) +
                 "] labels " + name(label_t);
        f(c);
      }
}

}  // namespace opstest
