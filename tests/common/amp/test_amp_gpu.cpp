// CUDA against the CPU for mixed precision: the 16-bit GEMM with an f32 result (tensor
// cores), the fused check-and-unscale kernel, Linear and Conv2d under autocast, and one
// scaled training step. The CPU result is computed here, on the same inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "gpu.h"
#include "mgpu/amp/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "random_data.h"
#include "mgpu/optim/sgd.h"

using namespace mgpu;
using mgpu::testing::uniform_tensor;

namespace {

const Device kGpu = Device::cuda(0);

// |a - b| <= rtol * (|b| + scale) elementwise, scale covering sums whose terms cancel.
void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double scale, const char* what) {
  INFO(what);
  const auto a = gpu.to(Device::cpu()).to_vector<double>(), b = cpu.to_vector<double>();
  REQUIRE(a.size() == b.size());
  std::size_t bad = a.size();
  for (std::size_t i = 0; i < a.size() && bad == a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= rtol * (std::fabs(b[i]) + scale))) bad = i;
  if (bad != a.size()) INFO("first mismatch at " << bad << ": " << a[bad] << " vs " << b[bad]);
  CHECK(bad == a.size());
}

}  // namespace

TEST_CASE("GPU: 16-bit GEMM with an f32 result matches the CPU", "[amp][gpu]") {
  for (DType t : {DType::f16, DType::bf16})
    for (int combo = 0; combo < 4; ++combo) {
      const bool ta = combo & 1, tb = combo & 2;
      const std::int64_t m = 70, n = 48, k = 130;
      const Tensor a = cast(uniform_tensor(ta ? Shape{k, m} : Shape{m, k}, 1, DType::f32), t);
      const Tensor b = cast(uniform_tensor(tb ? Shape{n, k} : Shape{k, n}, 2, DType::f32), t);
      const Tensor c_cpu = matmul(a, b, ta, tb, DType::f32);
      const Tensor c_gpu = matmul(a.to(kGpu), b.to(kGpu), ta, tb, DType::f32);
      CHECK(c_gpu.dtype() == DType::f32);
      // Both sum exact products in f32, in different orders: a few f32 ulps of sqrt(k).
      check_close(c_gpu, c_cpu, 1e-5, 1.0, "matmul f32 result");
      Tensor acc_cpu = Tensor::full({m, n}, 0.25), acc_gpu = acc_cpu.to(kGpu);
      matmul_out(acc_cpu, a, b, ta, tb, 1.0, 1.0);
      matmul_out(acc_gpu, a.to(kGpu), b.to(kGpu), ta, tb, 1.0, 1.0);
      check_close(acc_gpu, acc_cpu, 1e-5, 1.0, "matmul_out beta = 1");
    }
}

TEST_CASE("GPU: the fused check-and-unscale kernel matches the CPU", "[amp][gpu]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    INFO(dtype_name(t));
    Tensor clean = cast(scale(uniform_tensor({1000}, 3, DType::f32), 1000.0), t);
    Tensor cpu = clean.clone(), gpu = clean.to(kGpu);
    Tensor f_cpu = Tensor::zeros({}, DType::f32), f_gpu = Tensor::zeros({}, DType::f32, kGpu);
    amp::non_finite_check_and_unscale_({cpu}, f_cpu, amp::inverse_scale(3.f));
    amp::non_finite_check_and_unscale_({gpu}, f_gpu, amp::inverse_scale(3.f));
    CHECK(f_gpu.item() == 0.0);
    CHECK(gpu.to(Device::cpu()).to_vector<double>() == cpu.to_vector<double>());  // bit for bit
    Tensor with_inf = cast(clean, DType::f32);
    with_inf.data<float>()[777] = inf;
    Tensor d_gpu = cast(with_inf, t).to(kGpu);
    amp::non_finite_check_and_unscale_({gpu, d_gpu}, f_gpu, 0.5f);
    CHECK(f_gpu.item() == 1.0);
  }
}

TEST_CASE("GPU: Linear and Conv2d under autocast match the CPU", "[amp][gpu]") {
  for (DType t : {DType::f16, DType::bf16}) {
    INFO(dtype_name(t));
    nn::manual_seed(4);
    auto model = nn::make_model("cnn");
    auto gpu_model = model->clone();
    gpu_model->to(kGpu);
    const Tensor x = uniform_tensor({8, 1, 28, 28}, 5, DType::f32);
    Tensor y_cpu, y_gpu;
    {
      amp::Autocast region(t);
      y_cpu = model->forward(x);
      y_gpu = gpu_model->forward(x.to(kGpu));
    }
    // Same 16-bit operands on both; f32 sums in different orders.
    check_close(y_gpu, y_cpu, 1e-3, 1.0, "forward");
    const Tensor g = uniform_tensor(y_cpu.shape(), 6, DType::f32);
    model->backward(g);
    gpu_model->backward(g.to(kGpu));
    auto p = model->parameters(), q = gpu_model->parameters();
    for (std::size_t i = 0; i < p.size(); ++i) {
      CHECK(q[i]->grad.dtype() == DType::f32);
      check_close(q[i]->grad, p[i]->grad, 2e-2, 1.0, "parameter gradient");
    }
  }
}

TEST_CASE("GPU: a scaled fp16 step on CUDA matches the CPU and skips on inf", "[amp][gpu]") {
  nn::manual_seed(9);
  auto cpu_model = nn::make_model("mlp");
  auto gpu_model = cpu_model->clone();
  gpu_model->to(kGpu);
  optim::SGD sgd_cpu(cpu_model->parameters(), {0.1}), sgd_gpu(gpu_model->parameters(), {0.1});
  amp::GradScaler scaler_cpu, scaler_gpu;
  const Tensor x = uniform_tensor({16, 784}, 7, DType::f32);
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>(16, 3), {16});
  for (int poison = 0; poison < 2; ++poison) {
    for (auto* side : {&scaler_cpu, &scaler_gpu}) {
      const bool gpu = side == &scaler_gpu;
      nn::Module& m = gpu ? *gpu_model : *cpu_model;
      nn::CrossEntropyLoss loss;
      m.zero_grad();
      {
        amp::Autocast region(DType::f16);
        loss.forward(m.forward(gpu ? x.to(kGpu) : x), gpu ? y.to(kGpu) : y);
      }
      Tensor g = side->scale(loss.backward());
      if (poison) g = scale(g, std::numeric_limits<double>::infinity());
      m.backward(g);
      CHECK(side->step(gpu ? static_cast<optim::Optimizer&>(sgd_gpu) : sgd_cpu) == !poison);
      side->update();
    }
    CHECK(scaler_gpu.get_scale() == scaler_cpu.get_scale());
    auto p = cpu_model->parameters(), q = gpu_model->parameters();
    for (std::size_t i = 0; i < p.size(); ++i) check_close(q[i]->value, p[i]->value, 1e-4, 1.0, "weights");
  }
}
