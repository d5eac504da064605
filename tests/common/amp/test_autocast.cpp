// The precision policy: Autocast regions, the weight-cast cache, the mixed-precision GEMM,
// and Linear / Conv2d inside a region (16-bit GEMM operands, f32 results and gradients).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "mgpu/amp/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "random_data.h"

using namespace mgpu;
using mgpu::testing::uniform_tensor;

namespace {

// The values of t after a round trip through `dtype` (what a cast to 16 bits keeps).
std::vector<double> rounded(const Tensor& t, DType dtype) {
  return cast(t, dtype).to_vector<double>();
}

// C = A B^T (A [m, k], B [n, k]) in double from the given values.
std::vector<double> gemm_nt(const std::vector<double>& a, const std::vector<double>& b,
                            std::int64_t m, std::int64_t n, std::int64_t k) {
  std::vector<double> c(m * n, 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[j * k + p];
  return c;
}

// |got - want| <= tol * (1 + |want|) everywhere.
void check_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  std::size_t bad = got.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) {
      bad = i;
      break;
    }
  if (bad != got.size()) INFO("first mismatch at " << bad << ": " << got[bad] << " vs " << want[bad]);
  CHECK(bad == got.size());
}

}  // namespace

TEST_CASE("Autocast: regions nest, restore, and accept only 16-bit dtypes", "[amp][autocast]") {
  CHECK_FALSE(amp::is_autocast_enabled());
  {
    amp::Autocast outer(DType::bf16);
    CHECK(amp::is_autocast_enabled());
    CHECK(amp::autocast_dtype() == DType::bf16);
    {
      amp::Autocast inner(DType::f16);
      CHECK(amp::autocast_dtype() == DType::f16);
      {
        amp::Autocast off(DType::f16, /*enabled=*/false);
        CHECK_FALSE(amp::is_autocast_enabled());
      }
      CHECK(amp::is_autocast_enabled());
    }
    CHECK(amp::autocast_dtype() == DType::bf16);
  }
  CHECK_FALSE(amp::is_autocast_enabled());
  CHECK_THROWS_WITH(amp::Autocast(DType::f32), Catch::Contains("f16 or bf16"));
}

TEST_CASE("Autocast: gemm_dtype casts f32 weights only", "[amp][autocast]") {
  const Tensor w32 = Tensor::zeros({2, 2}), w64 = Tensor::zeros({2, 2}, DType::f64);
  const Tensor w16 = Tensor::zeros({2, 2}, DType::f16);
  CHECK(amp::gemm_dtype(w32) == DType::f32);
  amp::Autocast region(DType::f16);
  CHECK(amp::gemm_dtype(w32) == DType::f16);
  CHECK(amp::gemm_dtype(w64) == DType::f64);  // gradient checks stay in f64
  CHECK(amp::gemm_dtype(w16) == DType::f16);
}

TEST_CASE("Autocast: a weight is cast once per region", "[amp][autocast]") {
  const Tensor w = uniform_tensor({8, 4}, 1, DType::f32);
  {
    amp::Autocast region(DType::bf16);
    const Tensor a = amp::cast_weight(w, DType::bf16);
    const Tensor b = amp::cast_weight(w, DType::bf16);
    CHECK(a.dtype() == DType::bf16);
    CHECK(a.shares_storage(b));
    CHECK(amp::autocast_cache_size() == 1);
    // A reshaped view of the same memory (Conv2d's weight as a matrix) shares the cast.
    const Tensor flat = amp::cast_weight(w.reshape({32}), DType::bf16);
    CHECK(flat.shares_storage(a));
    CHECK(flat.shape() == Shape{32});
    {
      amp::Autocast nested(DType::bf16);
      CHECK(amp::cast_weight(w, DType::bf16).shares_storage(a));
    }
    CHECK(amp::autocast_cache_size() == 1);  // only the outermost region clears it
    CHECK(a.to_vector<float>() == cast(w, DType::bf16).to_vector<float>());
  }
  CHECK(amp::autocast_cache_size() == 0);
  {
    amp::Autocast no_cache(DType::bf16, true, /*cache_enabled=*/false);
    const Tensor a = amp::cast_weight(w, DType::bf16);
    CHECK_FALSE(a.shares_storage(amp::cast_weight(w, DType::bf16)));
    CHECK(amp::autocast_cache_size() == 0);
  }
  // Outside a region nothing is cached, and a weight already in the dtype is returned as is.
  CHECK(amp::cast_weight(w, DType::f32).shares_storage(w));
  amp::cast_weight(w, DType::f16);
  CHECK(amp::autocast_cache_size() == 0);
}

TEST_CASE("matmul: 16-bit operands with an f32 result", "[amp][matmul]") {
  for (DType t : {DType::f16, DType::bf16}) {
    INFO(dtype_name(t));
    const std::int64_t m = 9, n = 7, k = 33;
    const Tensor a = cast(uniform_tensor({m, k}, 2, DType::f32), t);
    const Tensor b = cast(uniform_tensor({n, k}, 3, DType::f32), t);
    const Tensor c = matmul(a, b, false, true, DType::f32);
    CHECK(c.dtype() == DType::f32);
    const auto want = gemm_nt(a.to_vector<double>(), b.to_vector<double>(), m, n, k);
    // Products of 16-bit values are exact in float; only the f32 sum rounds (k terms).
    check_near(c.to_vector<float>(), want, 40 * std::ldexp(1.0, -24), "f32 result");
    // Accumulating into an f32 C (beta = 1), as a weight gradient does.
    Tensor acc = Tensor::full({m, n}, 0.5);
    matmul_out(acc, a, b, false, true, 1.0, 1.0);
    std::vector<double> want_acc(want);
    for (double& v : want_acc) v += 0.5;
    check_near(acc.to_vector<float>(), want_acc, 40 * std::ldexp(1.0, -24), "beta = 1");
  }
  const Tensor a = Tensor::zeros({2, 3}, DType::f16), b = Tensor::zeros({3, 2}, DType::f16);
  CHECK_THROWS_WITH(matmul(a, b, false, false, DType::f64), Catch::Contains("cannot write"));
  CHECK_THROWS_WITH(matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}), false, false, DType::f16),
                    Catch::Contains("cannot write"));
  Tensor c64 = Tensor::zeros({2, 2}, DType::f64);
  CHECK_THROWS_WITH(matmul_out(c64, a, b), Catch::Contains("dtype mismatch"));
}

TEST_CASE("Linear under autocast: 16-bit GEMMs, f32 output and gradients", "[amp][autocast]") {
  for (DType t : {DType::f16, DType::bf16}) {
    INFO(dtype_name(t));
    nn::manual_seed(5);
    nn::Linear layer(16, 8);
    const Tensor x = uniform_tensor({4, 16}, 7, DType::f32);
    Tensor y;
    {
      amp::Autocast region(t);
      y = layer.forward(x);
    }
    CHECK(y.dtype() == DType::f32);
    // y = round16(x) round16(W)^T + b, summed in f32.
    auto want = gemm_nt(rounded(x, t), rounded(layer.weight().value, t), 4, 8, 16);
    const auto b = layer.bias().value.to_vector<double>();
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += b[i % 8];
    check_near(y.to_vector<float>(), want, 1e-6, "forward");

    const Tensor g = uniform_tensor({4, 8}, 9, DType::f32);
    const Tensor dx = layer.backward(g);  // outside the region: uses what forward saved
    CHECK(dx.dtype() == DType::f32);
    CHECK(layer.weight().grad.dtype() == DType::f32);
    // dW = round16(g)^T round16(x), dx = round16(g) round16(W), db = sum(g) in f32.
    const auto gr = rounded(g, t), xr = rounded(x, t), wr = rounded(layer.weight().value, t);
    std::vector<double> dw(8 * 16, 0.0), want_dx(4 * 16, 0.0), db(8, 0.0);
    for (int n = 0; n < 4; ++n)
      for (int o = 0; o < 8; ++o) {
        db[o] += g.to_vector<double>()[n * 8 + o];
        for (int i = 0; i < 16; ++i) {
          dw[o * 16 + i] += gr[n * 8 + o] * xr[n * 16 + i];
          want_dx[n * 16 + i] += gr[n * 8 + o] * wr[o * 16 + i];
        }
      }
    check_near(layer.weight().grad.to_vector<float>(), dw, 1e-6, "weight grad");
    check_near(dx.to_vector<float>(), want_dx, 1e-6, "input grad");
    check_near(layer.bias().grad.to_vector<float>(), db, 1e-6, "bias grad");
  }
}

TEST_CASE("Linear outside autocast: unchanged f32 arithmetic", "[amp][autocast]") {
  nn::manual_seed(5);
  nn::Linear layer(16, 8);
  const Tensor x = uniform_tensor({4, 16}, 7, DType::f32);
  Tensor y = layer.forward(x);
  Tensor want = matmul(x, layer.weight().value, false, true);
  add_rowwise_(want, layer.bias().value);
  CHECK(y.to_vector<float>() == want.to_vector<float>());
  const Tensor g = uniform_tensor({4, 8}, 9, DType::f32);
  const Tensor dx = layer.backward(g);
  CHECK(dx.to_vector<float>() == matmul(g, layer.weight().value).to_vector<float>());
  CHECK(layer.weight().grad.to_vector<float>() == matmul(g, x, true, false).to_vector<float>());
  // A 16-bit input outside a region is still an error that names the fix.
  CHECK_THROWS_WITH(layer.forward(cast(x, DType::f16)), Catch::Contains("Autocast"));
}

TEST_CASE("Conv2d under autocast: close to f32, f32 output and gradients", "[amp][autocast]") {
  nn::manual_seed(8);
  nn::Conv2d conv(3, 4, 3, 1, 1);
  auto ref = conv.clone();
  const Tensor x = uniform_tensor({2, 3, 6, 6}, 4, DType::f32);
  const Tensor g = uniform_tensor({2, 4, 6, 6}, 6, DType::f32);
  Tensor y, dx;
  {
    amp::Autocast region(DType::bf16);
    y = conv.forward(x);
  }
  dx = conv.backward(g);
  Tensor y_ref = ref->forward(x), dx_ref = ref->backward(g);
  CHECK(y.dtype() == DType::f32);
  CHECK(dx.dtype() == DType::f32);
  // bf16 keeps 8 significant bits: each operand is off by up to 2^-9 relative.
  check_near(y.to_vector<float>(), y_ref.to_vector<double>(), 0.03, "forward");
  check_near(dx.to_vector<float>(), dx_ref.to_vector<double>(), 0.03, "input grad");
  auto p = conv.parameters(), q = ref->parameters();
  for (std::size_t i = 0; i < p.size(); ++i) {
    CHECK(p[i]->grad.dtype() == DType::f32);
    check_near(p[i]->grad.to_vector<float>(), q[i]->grad.to_vector<double>(), 0.05, "param grad");
  }
}

TEST_CASE("fp16 underflow: small gradients vanish without a loss scale", "[amp][autocast]") {
  // A gradient of 1e-8 is below fp16's smallest subnormal (2^-24 = 6e-8): cast to f16 it
  // becomes 0 and the weight learns nothing. Scaled by 2^16 it survives the cast, and
  // dividing the f32 weight gradient by 2^16 afterwards gives the true value.
  nn::manual_seed(1);
  nn::Linear layer(4, 2, /*bias=*/false);
  const Tensor x = Tensor::full({1, 4}, 1.0);
  const Tensor g = Tensor::full({1, 2}, 1e-8);
  {
    amp::Autocast region(DType::f16);
    layer.forward(x);
  }
  layer.backward(g);
  for (float v : layer.weight().grad.to_vector<float>()) CHECK(v == 0.f);
  layer.zero_grad();
  {
    amp::Autocast region(DType::f16);
    layer.forward(x);
  }
  layer.backward(scale(g, 65536.0));
  for (float v : layer.weight().grad.to_vector<float>())
    CHECK(v / 65536.f == Approx(1e-8).epsilon(1e-3));
  // bf16 has fp32's exponent range: no scale needed.
  layer.zero_grad();
  {
    amp::Autocast region(DType::bf16);
    layer.forward(x);
  }
  layer.backward(g);
  for (float v : layer.weight().grad.to_vector<float>()) CHECK(v == Approx(1e-8).epsilon(1e-2));
}
