// Operand checks: every mismatch names the op and both operands.
#include "ops_test_util.h"

using namespace mgpu;
using namespace opstest;

TEST_CASE("elementwise ops name the op and both operands on a mismatch", "[ops][errors]") {
  const Tensor a = Tensor::zeros({2, 3});
  const Tensor b = Tensor::zeros({3, 2});
  CHECK_THROWS_WITH(add(a, b), Catch::StartsWith("add:") && Catch::Contains("f32[2, 3] on cpu:0") &&
                                   Catch::Contains("f32[3, 2] on cpu:0"));
  CHECK_THROWS_WITH(sub(a, Tensor::zeros({2, 3}, DType::f64)),
                    Catch::StartsWith("sub:") && Catch::Contains("dtype") &&
                        Catch::Contains("f32[2, 3]") && Catch::Contains("f64[2, 3]"));
  CHECK_THROWS_WITH(mul(a, Tensor::zeros({2, 3}, DType::f32, Device::cpu(1))),
                    Catch::StartsWith("mul:") && Catch::Contains("device") &&
                        Catch::Contains("cpu:0") && Catch::Contains("cpu:1"));
  Tensor c = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(add_(c, b), Catch::StartsWith("add_:") && Catch::Contains("[3, 2]"));
  CHECK_THROWS_WITH(sub_(c, b), Catch::StartsWith("sub_:") && Catch::Contains("[3, 2]"));
  CHECK_THROWS_WITH(mul_(c, b), Catch::StartsWith("mul_:") && Catch::Contains("[3, 2]"));
  CHECK_THROWS_WITH(axpy_(c, 2.0, b), Catch::StartsWith("axpy_:") && Catch::Contains("[2, 3]") &&
                                          Catch::Contains("[3, 2]"));
  CHECK_THROWS_WITH(relu_backward(a, b), Catch::StartsWith("relu_backward:") &&
                                             Catch::Contains("[2, 3]") && Catch::Contains("[3, 2]"));
}

TEST_CASE("ops reject integer and undefined operands", "[ops][errors]") {
  const Tensor i = Tensor::zeros({4}, DType::i32);
  CHECK_THROWS_WITH(add(i, i), Catch::Contains("add") && Catch::Contains("i32"));
  CHECK_THROWS_WITH(relu(i), Catch::Contains("relu") && Catch::Contains("i32"));
  CHECK_THROWS_WITH(sum(i), Catch::Contains("sum") && Catch::Contains("i32"));
  CHECK_THROWS_WITH(scale(i, 2.0), Catch::Contains("scale") && Catch::Contains("i32"));
  const Tensor undefined;
  CHECK_THROWS_WITH(add(undefined, Tensor::zeros({4})),
                    Catch::Contains("add") && Catch::Contains("undefined"));
  CHECK_THROWS_WITH(fill_(const_cast<Tensor&>(undefined), 1.0), Catch::Contains("fill_"));
  CHECK_THROWS_WITH(cast(undefined, DType::f32), Catch::Contains("cast"));
}

TEST_CASE("a CUDA tensor in a build or machine without a GPU is a clear error", "[ops][errors]") {
  if (cuda_available()) return;  // meaningful only where there is none
  CHECK_THROWS(add(Tensor::zeros({2}, DType::f32, Device::cuda(0)),
                   Tensor::zeros({2}, DType::f32, Device::cuda(0))));
}
