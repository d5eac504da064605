// matmul / matmul_out on the CPU against a naive triple loop in f64, for all four
// transpose combinations.
#include <cmath>
#include <limits>

#include "ops_reference.h"

using namespace mgpu;
using namespace opstest;

TEST_CASE("matmul: all transpose combinations, every float dtype", "[ops][matmul]") {
  for_each_gemm_case([](const GemmCase& k) {
    const Tensor c = matmul(k.a, k.b, k.ta, k.tb);
    CHECK(c.shape() == Shape{k.g.m, k.g.n});
    CHECK(c.dtype() == k.t);
    check_close(values(c), k.want, gemm_rtol(k.t, k.g.k), tiny(k.t), k.what, k.scale);
  });
}

TEST_CASE("matmul_out: alpha, beta, and beta = 0 ignores C", "[ops][matmul]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : float_dtypes())
    for (const Gemm& g : gemm_sizes()) {
      const Tensor a = random_tensor({g.m, g.k}, t);
      const Tensor b = random_tensor({g.n, g.k}, t);
      const Tensor c0 = random_tensor({g.m, g.n}, t);
      std::vector<double> ab, scale;
      gemm_reference(a, b, false, true, g, ab, scale);
      const auto vc0 = values(c0);
      // C = 0.5 A B^T + 2 C (the gradient-accumulation form).
      Tensor c = c0.clone();
      matmul_out(c, a, b, false, true, 0.5, 2.0);
      std::vector<double> want(ab.size()), want_scale(ab.size());
      for (std::size_t i = 0; i < ab.size(); ++i) {
        want[i] = 0.5 * ab[i] + 2.0 * vc0[i];
        want_scale[i] = 0.5 * scale[i] + 2.0 * std::fabs(vc0[i]);
      }
      check_close(values(c), want, gemm_rtol(t, g.k + 1), tiny(t), "matmul_out beta=2 " + name(t),
                  want_scale);
      // beta = 0: whatever C held (here NaN) must not leak into the result.
      Tensor dirty = Tensor::full({g.m, g.n}, nan, t);
      matmul_out(dirty, a, b, false, true);
      check_close(values(dirty), ab, gemm_rtol(t, g.k), tiny(t), "matmul_out beta=0 " + name(t), scale);
    }
}

TEST_CASE("matmul rejects mismatched operands", "[ops][matmul][errors]") {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  CHECK_THROWS_WITH(matmul(a, b), Catch::Contains("matmul") && Catch::Contains("[2, 3]") &&
                                      Catch::Contains("[4, 5]"));
  CHECK_THROWS_WITH(matmul(a, Tensor::zeros({3, 2}, DType::f64)),
                    Catch::Contains("matmul") && Catch::Contains("f32[2, 3]") &&
                        Catch::Contains("f64[3, 2]"));
  CHECK_THROWS_WITH(matmul(a, Tensor::zeros({3, 2}, DType::f32, Device::cpu(1))),
                    Catch::Contains("matmul") && Catch::Contains("cpu:0") &&
                        Catch::Contains("cpu:1"));
  CHECK_THROWS_WITH(matmul(Tensor::zeros({6}), a), Catch::Contains("2-D") && Catch::Contains("[6]"));
  Tensor c = Tensor::zeros({2, 4});
  CHECK_THROWS_WITH(matmul_out(c, a, Tensor::zeros({3, 2})),
                    Catch::Contains("matmul") && Catch::Contains("[2, 4]") && Catch::Contains("[2, 2]"));
  Tensor sq = Tensor::zeros({3, 3});
  CHECK_THROWS_WITH(matmul_out(sq, sq, sq), Catch::Contains("overlaps"));
  CHECK_THROWS_WITH(matmul(Tensor::zeros({2, 2}, DType::i32), Tensor::zeros({2, 2}, DType::i32)),
                    Catch::Contains("matmul") && Catch::Contains("i32"));
}
