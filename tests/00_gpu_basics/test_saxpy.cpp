// Lesson 00, task 1: SAXPY on the CPU (against an f64 loop) and on CUDA (against the CPU twin).
#include "gpu_basics_test_util.h"

#include "gpu.h"
#include "mgpu/device.h"

using namespace lesson00_test;
using mgpu::Device;
using mgpu::Tensor;
namespace l00 = mgpu::lesson00;

namespace {

// Largest |got - (a*x + y)| relative to |a*x| + |y|: one float rounding of each operation.
double saxpy_error(float a, const std::vector<float>& x, const std::vector<float>& y,
                   const std::vector<float>& got) {
  REQUIRE(got.size() == x.size());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double ref = static_cast<double>(a) * x[i] + y[i];
    const double scale = std::fabs(static_cast<double>(a) * x[i]) + std::fabs(y[i]) + 1e-30;
    worst = std::max(worst, std::fabs(got[i] - ref) / scale);
  }
  return worst;
}

}  // namespace

TEST_CASE("task1: saxpy on the CPU matches an f64 loop (sizes 0, 1, odd, ragged)",
          "[00_gpu_basics][task1][points:3]") {
  for (float a : {2.5f, -1.0f, 0.0f}) {
    for (std::int64_t n : kSmallSizes) {
      INFO("a = " << a << ", n = " << n);
      const std::vector<float> x = random_floats(n, 1), y = random_floats(n, 2);
      Tensor xt = tensor_of(x), yt = tensor_of(y);
      l00::saxpy_(a, xt, yt);
      const std::string key = "a=" + std::to_string(a) + " n=" + std::to_string(n);
      record("y " + key, yt.to_vector<float>(), 1e-5);
      record("x " + key, xt.to_vector<float>(), 0);
      CHECK(saxpy_error(a, x, y, yt.to_vector<float>()) <= 1e-6);
      CHECK(xt.to_vector<float>() == x);  // x is an input: it must not change
    }
  }
}

TEST_CASE("task1: saxpy on the CPU, a large 2-D tensor", "[00_gpu_basics][task1][points:2]") {
  const std::int64_t rows = 1021, cols = 1031;  // ~1M elements, no power of two anywhere
  const std::vector<float> x = random_floats(rows * cols, 3), y = random_floats(rows * cols, 4);
  Tensor xt = Tensor::from_vector(x, {rows, cols}), yt = Tensor::from_vector(y, {rows, cols});
  l00::saxpy_(0.75f, xt, yt);
  record("y", yt.to_vector<float>(), 1e-5);
  CHECK(saxpy_error(0.75f, x, y, yt.to_vector<float>()) <= 1e-6);
}

TEST_CASE("task1: saxpy on CUDA matches the CPU twin (1 block to many blocks)",
          "[00_gpu_basics][task1][points:5][gpu]") {
  const Device gpu = Device::cuda(0);
  const double tol = mgpu::testing::gpu_rtol(mgpu::DType::f32);
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{255},
                         std::int64_t{l00::kThreadsPerBlock} + 1, std::int64_t{100003},
                         (std::int64_t{1} << 22) + 17}) {
    INFO("n = " << n);
    const float a = -1.75f;
    const std::vector<float> x = random_floats(n, 5), y = random_floats(n, 6);
    Tensor y_cpu = tensor_of(y);
    l00::saxpy_cpu(a, tensor_of(x), y_cpu);
    Tensor x_gpu = tensor_of(x, gpu), y_gpu = tensor_of(y, gpu);
    l00::saxpy_(a, x_gpu, y_gpu);
    const std::vector<float> got = y_gpu.to_vector<float>(), want = y_cpu.to_vector<float>();
    record("y n=" + std::to_string(n), got, 8 * tol);   // |a*x| + |y| <= 2.75
    record("x n=" + std::to_string(n), x_gpu.to_vector<float>(), 0);
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double scale = std::fabs(static_cast<double>(a) * x[i]) + std::fabs(y[i]) + 1e-30;
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / scale);
    }
    CHECK(worst <= tol);
    CHECK(x_gpu.to_vector<float>() == x);
  }
}
