// [gpu] Batch-norm statistics and the backward's sums, restructured to several blocks per
// channel, against the CPU on awkward shapes; the empty channel dimension; the elementwise
// batch-norm and AdamW kernels giving the CPU's bits on the same inputs (no fused
// multiply-add where the CPU rounds twice); transpose_inner's grid limit named right.
#include <catch2/catch.hpp>

#include "gpu.h"
#include "mgpu/nn/functional.h"
#include "mgpu/ops.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/stream.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using mgpu::testing::gpu_rtol;
using mgpu::testing::same_bits;
using nntest::check_close;
using nntest::kGpu;
using nntest::uniform_tensor;

namespace {

Tensor cpu(const Tensor& t) { return t.to(Device::cpu()); }

// Stats tolerances of the existing layer tests: f32 and 16-bit inputs have f32 statistics.
double stats_rtol(DType t) { return t == DType::f64 ? 1e-12 : 1e-5; }
double stats_atol(DType t) { return t == DType::f64 ? 1e-12 : 1e-5; }

}  // namespace

TEST_CASE("CUDA batch-norm statistics and backward sums match the CPU on awkward shapes",
          "[gpu][nn][batchnorm]") {
  // Few channels with many values (several blocks per channel, a short last block), S = 1
  // (BatchNorm1d: a step of the walk crosses many samples), S above the block size, S odd.
  const std::vector<Shape> shapes = {{64, 3, 37, 41}, {4097, 5}, {100003, 3}, {3, 300, 7, 5},
                                     {2, 3, 50, 61},  {1, 2, 1}, {33, 1, 257}, {8, 2, 4096}};
  std::uint64_t seed = 500;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const Shape& s : shapes) {
      INFO(dtype_name(dt) << shape_str(s));
      // Values off zero, so that a mean and its rounding are of a visible size.
      Tensor x = uniform_tensor(s, ++seed, dt, -0.5, 1.5);
      Tensor g = uniform_tensor(s, ++seed, dt);
      const BatchNormStats st = batch_norm_stats(x), sg = batch_norm_stats(x.to(kGpu));
      CHECK(sg.count == st.count);
      check_close(cpu(sg.mean), st.mean, stats_rtol(dt), stats_atol(dt), "mean");
      check_close(cpu(sg.var), st.var, stats_rtol(dt), stats_atol(dt), "var");
      // The backward's sums, from the same mean and invstd on both.
      const Tensor invstd = batch_norm_invstd(st.var, 1e-5);
      Tensor dy, dyx, dyg, dyxg;
      batch_norm_backward_reduce(g, x, st.mean, invstd, dy, dyx);
      batch_norm_backward_reduce(g.to(kGpu), x.to(kGpu), st.mean.to(kGpu), invstd.to(kGpu), dyg, dyxg);
      // A sum's rounding error is relative to the size of its terms, not of the result
      // (which may cancel): |dy| < 1 and |x - mean| < 2, over N*S terms per channel.
      const double terms = static_cast<double>(st.count);
      check_close(cpu(dyg), dy, 0, stats_rtol(dt) * terms, "sum_dy");
      check_close(cpu(dyxg), dyx, 0, stats_rtol(dt) * 2 * terms, "sum_dy_xmu");
    }
}

TEST_CASE("CUDA batch-norm of an input with no channels returns empty statistics, like the CPU",
          "[gpu][nn][batchnorm]") {
  for (const Shape& s : {Shape{4, 0}, Shape{4, 0, 3}, Shape{2, 0, 5, 5}}) {
    INFO(shape_str(s));
    const Tensor x = Tensor::zeros(s, DType::f32);
    const BatchNormStats st = batch_norm_stats(x), sg = batch_norm_stats(x.to(kGpu));
    CHECK(sg.mean.shape() == st.mean.shape());
    CHECK(sg.var.shape() == Shape{0});
    CHECK(sg.count == st.count);
    Tensor dy, dyx;
    batch_norm_backward_reduce(x.to(kGpu), x.to(kGpu), sg.mean, sg.mean, dy, dyx);
    CHECK(dy.shape() == Shape{0});
    synchronize(kGpu);  // a bad launch would show here at the latest
  }
}

TEST_CASE("CUDA batch-norm apply and backward apply give the CPU's bits on the same inputs",
          "[gpu][nn][batchnorm]") {
  std::uint64_t seed = 900;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Shape s{16, 7, 13, 11};
    const DType sdt = dt == DType::f64 ? DType::f64 : DType::f32;
    Tensor x = uniform_tensor(s, ++seed, dt), g = uniform_tensor(s, ++seed, dt);
    Tensor w = uniform_tensor({7}, ++seed, dt), b = uniform_tensor({7}, ++seed, dt);
    // Per-channel inputs made here, identical on both sides: only the kernels differ.
    Tensor mean = uniform_tensor({7}, ++seed, sdt, -0.1, 0.1);
    Tensor invstd = uniform_tensor({7}, ++seed, sdt, 0.5, 2.0);
    Tensor sum_dy = uniform_tensor({7}, ++seed, sdt, -50, 50);
    Tensor sum_dyx = uniform_tensor({7}, ++seed, sdt, -50, 50);
    auto G = [](const Tensor& t) { return t.to(kGpu); };
    CHECK(same_bits(batch_norm_apply(G(x), G(mean), G(invstd), G(w), G(b)),
                    batch_norm_apply(x, mean, invstd, w, b)));
    CHECK(same_bits(batch_norm_backward_apply(G(g), G(x), G(mean), G(invstd), G(w), G(sum_dy), G(sum_dyx), 2002),
                    batch_norm_backward_apply(g, x, mean, invstd, w, sum_dy, sum_dyx, 2002)));
  }
}

TEST_CASE("CUDA AdamW gives the CPU's bits, step after step", "[gpu][optim]") {
  std::uint64_t seed = 1300;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    Tensor p = uniform_tensor({4099}, ++seed, dt), m = Tensor::zeros({4099}, dt), v = Tensor::zeros({4099}, dt);
    Tensor pg = p.to(kGpu), mg = m.to(kGpu), vg = v.to(kGpu);
    for (int step = 1; step <= 5; ++step) {
      const Tensor grad = uniform_tensor({4099}, ++seed, dt);
      const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.999, step);
      optim::adamw_update_(p, grad, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, bc1, bc2);
      optim::adamw_update_(pg, grad.to(kGpu), mg, vg, 1e-3, 0.9, 0.999, 1e-8, 0.01, bc1, bc2);
    }
    CHECK(same_bits(mg, m));
    CHECK(same_bits(vg, v));
    CHECK(same_bits(pg, p));
  }
}

TEST_CASE("CUDA transpose_inner too large for one launch names the middle dimension",
          "[gpu][nn]") {
  const Tensor x = Tensor::zeros({1, 65535 * 32 + 1, 1}, DType::f16, kGpu);
  CHECK_THROWS_WITH(transpose_inner(x), Catch::Contains("middle dimension (2097121)"));
  // One tile row fewer runs, and transposes.
  const Tensor ok = Tensor::full({1, 65535 * 32, 1}, 1.0, DType::f16, kGpu);
  CHECK(transpose_inner(ok).shape() == Shape({1, 1, 65535 * 32}));
}
