// Every op on CUDA against the CPU reference computed here on the same fresh random
// inputs, per dtype, over the same sizes as the CPU tests. Ops whose CUDA kernels repeat
// the CPU's roundings exactly (fill, uniform, cast, relu, max/argmax) must agree bit for
// bit; arithmetic ops within the per-dtype tolerances of tests/support/gpu.h.
#include <cmath>
#include <limits>

#include "gpu.h"
#include "mgpu/stream.h"
#include "ops_reference.h"

using namespace mgpu;
using namespace opstest;
using mgpu::testing::gpu_rtol;

namespace {

const Device kGpu = Device::cuda(0);

Tensor gpu(const Tensor& t) { return t.to(kGpu); }

DType acc_of(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// |a| + |b| elementwise: the scale of a sum's rounding error.
std::vector<double> abs_plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> s(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) s[i] = std::fabs(a[i]) + std::fabs(b[i]);
  return s;
}

// sum and mean of x along axis (a: the same axis from the front) on CUDA against the CPU's;
// scale holds the sums of |x|.
void check_sum_mean_on_gpu(const Tensor& x, int axis, int a, std::vector<double> scale,
                           const std::string& what) {
  const DType t = x.dtype();
  const Tensor gx = gpu(x);
  check_close(values(sum(gx, axis)), values(sum(x, axis)), gpu_rtol(t), tiny(t), "sum " + what, scale);
  for (double& e : scale) e /= static_cast<double>(x.shape()[a]);
  check_close(values(mean(gx, axis)), values(mean(x, axis)), gpu_rtol(t), tiny(t), "mean " + what,
              scale);
}

}  // namespace

TEST_CASE("CUDA fill_ matches the CPU bit for bit", "[gpu][ops][fill]") {
  for (DType t : all_dtypes())
    for (std::int64_t n : sizes())
      for (double v : {-2.75, 1e20, 0.1}) {
        Tensor c = Tensor::empty({n}, t), g = Tensor::empty({n}, t, kGpu);
        fill_(c, v);
        fill_(g, v);
        check_equal(values(g), values(c), "fill_ " + name(t) + " " + std::to_string(v));
      }
}

TEST_CASE("CUDA uniform_ is bit-identical to the CPU; normal_ agrees", "[gpu][ops][random]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      const std::uint64_t seed = next_seed();
      Tensor c = Tensor::empty({n}, t), g = Tensor::empty({n}, t, kGpu);
      uniform_(c, seed, -0.3, 7.1, 12345);
      uniform_(g, seed, -0.3, 7.1, 12345);
      check_equal(values(g), values(c), "uniform_ " + name(t));
      normal_(c, seed, 0.5, 3.0, 99);
      normal_(g, seed, 0.5, 3.0, 99);
      // The GPU's log/cos may differ from the host libm's in the last bit of an f64.
      check_close(values(g), values(c), gpu_rtol(t), 1e-12 + tiny(t), "normal_ " + name(t));
    }
}

TEST_CASE("CUDA cast matches the CPU for every pair of dtypes", "[gpu][ops][cast]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (std::int64_t n : sizes()) {
    // Values spanning f16 overflow and the i32 range, plus the special values.
    Tensor src64 = random_tensor({n + 6}, DType::f64, -1e10, 1e10);
    double* p = src64.data<double>();
    const double specials[6] = {nan, inf, -inf, 0.5, -2.5, 65520.0};
    for (int i = 0; i < 6; ++i) p[n + i] = specials[i];
    for (std::int64_t i = 0; i < n; i += 3) p[i] *= 1e-6;  // some small values too
    for (DType from : all_dtypes()) {
      const Tensor src = cast(src64, from);
      const Tensor src_gpu = gpu(src);
      for (DType to : all_dtypes())
        check_equal(values(cast(src_gpu, to)), values(cast(src, to)),
                    "cast " + name(from) + " -> " + name(to));
    }
  }
}

TEST_CASE("CUDA elementwise ops match the CPU", "[gpu][ops][elementwise]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      const Tensor a = random_tensor({n}, t), b = random_tensor({n}, t);
      const Tensor ga = gpu(a), gb = gpu(b);
      const auto err_scale = abs_plus(values(a), values(b));
      const double r = gpu_rtol(t);
      check_close(values(add(ga, gb)), values(add(a, b)), r, tiny(t), "add " + name(t), err_scale);
      check_close(values(sub(ga, gb)), values(sub(a, b)), r, tiny(t), "sub " + name(t), err_scale);
      check_close(values(mul(ga, gb)), values(mul(a, b)), r, tiny(t), "mul " + name(t), err_scale);
      check_close(values(scale(ga, -0.37)), values(scale(a, -0.37)), r, tiny(t), "scale " + name(t), err_scale);
      Tensor c = a.clone(), g = ga.clone();
      add_(c, b);
      add_(g, gb);
      check_close(values(g), values(c), r, tiny(t), "add_ " + name(t), err_scale);
      sub_(c, b);
      sub_(g, gb);
      check_close(values(g), values(c), r, tiny(t), "sub_ " + name(t), err_scale);
      mul_(c, b);
      mul_(g, gb);
      check_close(values(g), values(c), r, tiny(t), "mul_ " + name(t), err_scale);
      scale_(c, 1.5);
      scale_(g, 1.5);
      check_close(values(g), values(c), r, tiny(t), "scale_ " + name(t), err_scale);
      axpy_(c, 0.3, b);
      axpy_(g, 0.3, gb);
      check_close(values(g), values(c), r, tiny(t), "axpy_ " + name(t), err_scale);
      check_equal(values(relu(ga)), values(relu(a)), "relu " + name(t));
      check_equal(values(relu_backward(gb, ga)), values(relu_backward(b, a)),
                  "relu_backward " + name(t));
    }
}

TEST_CASE("CUDA add_rowwise_ matches the CPU, also on a view", "[gpu][ops][elementwise]") {
  const std::vector<Shape> shapes = {{0, 5}, {1, 1}, {7, 13}, {300, 257}, {2, 3, 4}, {1024, 1024}};
  for (DType t : float_dtypes())
    for (const Shape& s : shapes) {
      const Tensor y = random_tensor(s, t), bias = random_tensor({s.back()}, t);
      Tensor c = y.clone(), g = gpu(y);
      add_rowwise_(c, bias);
      add_rowwise_(g, gpu(bias));
      check_close(values(g), values(c), gpu_rtol(t), tiny(t), "add_rowwise_ " + name(t) + shape_str(s));
    }
  // A view at an offset: the kernel must start at the view's first element.
  Tensor base = Tensor::zeros({50}, DType::f32, kGpu);
  Tensor window = base.view(7, {3, 4});
  add_rowwise_(window, gpu(Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4})));
  const auto v = values(base);
  CHECK(v[6] == 0.0f);
  CHECK(v[7] == 1.0f);
  CHECK(v[18] == 4.0f);
  CHECK(v[19] == 0.0f);
}

TEST_CASE("CUDA sum and mean of a whole tensor match the CPU", "[gpu][ops][reduce]") {
  for (DType t : float_dtypes())
    for (std::int64_t n : sizes()) {
      const Tensor x = random_tensor({n}, t);
      double scale = 0;
      for (double e : values(x)) scale += std::fabs(e);
      const Tensor gx = gpu(x);
      const double tol = gpu_rtol(acc_of(t)) * scale;
      CHECK(sum(gx).dtype() == acc_of(t));
      INFO(name(t) << " n=" << n);
      CHECK(std::fabs(sum(gx).item() - sum(x).item()) <= tol);
      if (n == 0) {
        CHECK(sum(gx).item() == 0.0);
        CHECK(std::isnan(mean(gx).item()));
      } else {
        CHECK(std::fabs(mean(gx).item() - mean(x).item()) <= tol / n);
      }
    }
  // Integers below 2^24 add exactly in f32, in any order: a lost or doubled element shows.
  for (std::int64_t n : {1, 257, (1 << 20) + 3, 1 << 23}) {
    CHECK(sum(Tensor::full({n}, 1.0, DType::f16, kGpu)).item() == static_cast<double>(n));
    CHECK(sum(Tensor::full({n}, 1.0, DType::f32, kGpu)).item() == static_cast<double>(n));
  }
}

TEST_CASE("CUDA sum and mean along an axis match the CPU", "[gpu][ops][reduce]") {
  for_each_axis_case([](const AxisCase& c) { check_sum_mean_on_gpu(c.x, c.axis, c.a, c.scale, c.what); });
}

TEST_CASE("CUDA sums down tall columns (bias gradients) match the CPU", "[gpu][ops][reduce]") {
  // The column kernel cuts the rows into chunks among blocks when there are few columns:
  // a bias gradient is sum(grad, 0) of N*P rows by C_out columns. Column counts below, at
  // and above a 32-wide tile, row counts that leave a short last chunk, and a middle axis.
  const std::vector<std::pair<Shape, int>> cases = {
      {{86528, 32}, 0}, {{100003, 10}, 0}, {{70001, 33}, 0}, {{5000, 1000}, 0},
      {{257, 3}, 0},    {{3, 70001, 7}, 1}, {{2, 4099, 65}, 1}, {{1, 1, 40}, 0}};
  for (DType t : float_dtypes())
    for (const auto& [s, a] : cases) {
      const Tensor x = random_tensor(s, t);
      std::vector<double> ref, scale;
      axis_reference(values(x), s, a, ref, scale);
      check_sum_mean_on_gpu(x, a, a, scale, name(t) + shape_str(s) + " axis " + std::to_string(a));
    }
}

TEST_CASE("CUDA max_last and argmax_last match the CPU exactly", "[gpu][ops][reduce]") {
  const std::vector<Shape> shapes = {{0, 5}, {1}, {1, 1}, {7, 13}, {300, 257}, {2, 3, 33},
                                     {4, 1000}, {1, 1 << 20}, {1 << 14, 64}};
  for (DType t : float_dtypes())
    for (const Shape& s : shapes) {
      // bf16/f16 values in [-1, 1) repeat often: ties exercise the first-index rule.
      const Tensor x = random_tensor(s, t);
      const Tensor gx = gpu(x);
      check_equal(values(max_last(gx)), values(max_last(x)), "max_last " + name(t) + shape_str(s));
      check_equal(values(argmax_last(gx)), values(argmax_last(x)),
                  "argmax_last " + name(t) + shape_str(s));
    }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 3, 3, 2, 5, 5, 5, 5, -1, nan, 4, nan}, {3, 4});
  check_equal(values(argmax_last(gpu(x))), {1, 0, 1}, "ties and NaN on CUDA");
}

TEST_CASE("CUDA matmul matches the CPU for all transpose combinations", "[gpu][ops][matmul]") {
  for_each_gemm_case([](const GemmCase& k) {
    const Tensor &a = k.a, &b = k.b;
    const DType t = k.t;
    const bool ta = k.ta, tb = k.tb;
    // Both results are within gemm_rtol of the exact product, so of each other twice that.
    const double rtol = 2 * gemm_rtol(t, k.g.k) + gpu_rtol(t);
    check_close(values(matmul(gpu(a), gpu(b), ta, tb)), values(matmul(a, b, ta, tb)), rtol, tiny(t),
                k.what, k.scale);
    // Accumulating form: C = 0.5 op(A) op(B) + 2 C.
    const Tensor c0 = random_tensor({k.g.m, k.g.n}, t);
    Tensor c = c0.clone(), gc = gpu(c0);
    matmul_out(c, a, b, ta, tb, 0.5, 2.0);
    matmul_out(gc, gpu(a), gpu(b), ta, tb, 0.5, 2.0);
    std::vector<double> scale2 = values(c0);
    for (std::size_t i = 0; i < scale2.size(); ++i) scale2[i] = 0.5 * k.scale[i] + 2 * std::fabs(scale2[i]);
    check_close(values(gc), values(c), rtol, 0, k.what + " beta=2", scale2);
  });
}

TEST_CASE("CUDA softmax cross-entropy matches the CPU", "[gpu][ops][loss]") {
  for_each_xent_case([](const XentCase& c) {
    const DType t = c.t;
    Tensor probs, gprobs;
    const double loss = softmax_cross_entropy(c.logits, c.labels, &probs).item();
    const Tensor glabels = gpu(c.labels);
    const Tensor gloss = softmax_cross_entropy(gpu(c.logits), glabels, &gprobs);
    CHECK(gloss.dtype() == acc_of(t));
    CHECK(gprobs.device() == kGpu);
    INFO(c.what << ": CPU loss " << loss << ", CUDA loss " << gloss.item());
    if (c.s.rows == 0) {
      CHECK(std::isnan(gloss.item()));
    } else {
      CHECK(std::fabs(gloss.item() - loss) <= 4 * gpu_rtol(acc_of(t)) * (1 + std::fabs(loss)));
    }
    check_close(values(gprobs), values(probs), gpu_rtol(t), tiny(t), "probs " + c.what);
    const Tensor grad = softmax_cross_entropy_backward(probs, c.labels, 2.5);
    const Tensor ggrad = softmax_cross_entropy_backward(gprobs, glabels, 2.5);
    std::vector<double> scale = values(probs);
    for (double& e : scale) e = (std::fabs(e) + 1) * 2.5 / std::max<std::int64_t>(1, c.s.rows);
    check_close(values(ggrad), values(grad), gpu_rtol(t), tiny(t), "backward " + c.what, scale);
  });
  // Huge logits: still finite on the GPU.
  const Tensor huge = Tensor::from_vector(std::vector<float>{1000, 1001, 999, -1000, -1001, -999}, {2, 3});
  const Tensor lab = Tensor::from_vector(std::vector<std::int32_t>{0, 2}, {2});
  const double want = softmax_cross_entropy(huge, lab).item();
  const double got = softmax_cross_entropy(gpu(huge), gpu(lab)).item();
  CHECK(std::isfinite(got));
  CHECK(std::fabs(got - want) <= 1e-5 * (1 + want));
}

TEST_CASE("CUDA softmax cross-entropy reports a bad label from the device", "[gpu][ops][loss][errors]") {
  const Tensor logits = Tensor::zeros({3, 10}, DType::f32, kGpu);
  const Tensor bad = gpu(Tensor::from_vector(std::vector<std::int64_t>{1, 10, 2}, {3}));
  CHECK_THROWS_WITH(softmax_cross_entropy(logits, bad),
                    Catch::Contains("softmax_cross_entropy") && Catch::Contains("label 10") &&
                        Catch::Contains("row 1"));
  // The op still works afterwards (the flag is per call, the stream is healthy).
  const Tensor good = gpu(Tensor::from_vector(std::vector<std::int32_t>{1, 9, 2}, {3}));
  CHECK(std::fabs(softmax_cross_entropy(logits, good).item() - std::log(10.0)) < 1e-6);
}

TEST_CASE("CUDA ops name both devices on a mismatch", "[gpu][ops][errors]") {
  const Tensor a = Tensor::zeros({2, 3}, DType::f32, kGpu);
  const Tensor b = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(add(a, b), Catch::Contains("add") && Catch::Contains("cuda:0") &&
                                   Catch::Contains("cpu:0"));
  CHECK_THROWS_WITH(matmul(a, b, false, true), Catch::Contains("matmul") &&
                                                   Catch::Contains("cuda:0") && Catch::Contains("cpu:0"));
}
