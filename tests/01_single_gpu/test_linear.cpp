// Lesson 01, task 1: the learner's Linear (nn::Linear's forward and backward), forward
// values and gradients (finite differences in f64), accumulation, hooks, frozen weights.
#include "single_gpu_test_util.h"
#include "mgpu/nn/init.h"

using namespace lesson01_test;
using mgpu::nn::Linear;

TEST_CASE("task1: Linear forward computes x W^T + b", "[01_single_gpu][task1][points:2]") {
  mgpu::nn::manual_seed(1);
  Linear lin(3, 2);
  lin.to(DType::f64);
  mgpu::copy_(lin.weight().value, Tensor::from_vector<double>({1, 2, 3, -1, 0, 2}, {2, 3}));
  mgpu::copy_(lin.bias().value, Tensor::from_vector<double>({0.5, -0.5}, {2}));
  Tensor x = Tensor::from_vector<double>({1, 1, 1, 2, 0, -1}, {2, 3});
  Tensor y = lin.forward(x);
  REQUIRE(y.shape() == Shape{2, 2});
  // Row 0: (1+2+3)+0.5, (-1+0+2)-0.5; row 1: (2+0-3)+0.5, (-2+0-2)-0.5.
  CHECK(values(y) == std::vector<double>{6.5, 0.5, -0.5, -4.5});
  Linear no_bias(3, 2, false);
  no_bias.to(DType::f64);
  mgpu::copy_(no_bias.weight().value, lin.weight().value);
  CHECK(values(no_bias.forward(x)) == std::vector<double>{6, 1, -1, -4});
}

TEST_CASE("task1: Linear gradients match finite differences (f64)",
          "[01_single_gpu][task1][points:4]") {
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    mgpu::nn::manual_seed(2);
    Linear lin(5, 4, bias);
    lin.to(DType::f64);
    Tensor x = uniform_tensor({3, 5}, 10);
    Tensor w = uniform_tensor({3, 4}, 11);  // L = sum(y * w), so dL/dy = w
    lin.zero_grad();
    lin.forward(x);
    Tensor dx = lin.backward(w);
    auto loss = [&] {
      lin.eval();  // forward without saving anything
      const auto y = values(lin.forward(x));
      lin.train();
      double s = 0;
      const auto wv = values(w);
      for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * wv[i];
      return s;
    };
    auto numeric = [&](Tensor& t) {
      std::vector<double> g(static_cast<std::size_t>(t.numel()));
      const double h = 1e-6;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        double& v = t.data<double>()[i];
        const double keep = v;
        v = keep + h;
        const double up = loss();
        v = keep - h;
        const double down = loss();
        v = keep;
        g[static_cast<std::size_t>(i)] = (up - down) / (2 * h);
      }
      return Tensor::from_vector(g, t.shape());
    };
    L01_CHECK_CLOSE(dx, numeric(x), 1e-6, 1e-8);
    L01_CHECK_CLOSE(lin.weight().grad, numeric(lin.weight().value), 1e-6, 1e-8);
    if (bias) L01_CHECK_CLOSE(lin.bias().grad, numeric(lin.bias().value), 1e-6, 1e-8);
  }
}

TEST_CASE("task1: Linear adds to gradients and fires each hook once, with the final gradient",
          "[01_single_gpu][task1][points:2]") {
  mgpu::nn::manual_seed(3);
  Linear lin(4, 3);
  lin.to(DType::f64);
  std::vector<std::string> fired;
  std::vector<double> seen_weight_grad;
  for (auto* p : lin.parameters())
    p->add_grad_ready_hook([&](mgpu::nn::Parameter& q) {
      fired.push_back(q.name());
      if (q.name() == "weight") seen_weight_grad = values(q.grad);
    });
  Tensor x = uniform_tensor({2, 4}, 20), g = uniform_tensor({2, 3}, 21);
  lin.forward(x);
  lin.backward(g);
  const auto once = values(lin.weight().grad);
  CHECK(fired.size() == 2);
  CHECK(seen_weight_grad == once);
  lin.forward(x);
  lin.backward(g);
  CHECK(fired.size() == 4);
  const auto twice = values(lin.weight().grad);
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == Approx(2 * once[i]));
  const auto bias_twice = values(lin.bias().grad);
  // The bias gradient is the column sum of g, twice.
  const auto gv = values(g);
  for (int j = 0; j < 3; ++j) CHECK(bias_twice[j] == Approx(2 * (gv[j] + gv[3 + j])));
}

TEST_CASE("task1: a frozen weight gets no gradient; backward still returns dL/dx",
          "[01_single_gpu][task1][points:1]") {
  mgpu::nn::manual_seed(4);
  Linear lin(4, 3);
  lin.to(DType::f64);
  lin.weight().set_requires_grad(false);
  int hooks = 0;
  lin.weight().add_grad_ready_hook([&](mgpu::nn::Parameter&) { ++hooks; });
  Tensor x = uniform_tensor({2, 4}, 30), g = uniform_tensor({2, 3}, 31);
  lin.forward(x);
  Tensor dx = lin.backward(g);
  CHECK(hooks == 0);
  L01_CHECK_CLOSE(dx, mgpu::matmul(g, lin.weight().value), 1e-12, 1e-12);
}

TEST_CASE("task1: Linear on CUDA matches the CPU", "[01_single_gpu][task1][points:1][gpu]") {
  mgpu::nn::manual_seed(5);
  Linear cpu(37, 19);
  auto gpu = cpu.clone();
  gpu->to(mgpu::Device::cuda(0));
  Tensor x = uniform_tensor({23, 37}, 40, DType::f32), g = uniform_tensor({23, 19}, 41, DType::f32);
  Tensor y = cpu.forward(x);
  Tensor yg = gpu->forward(x.to(mgpu::Device::cuda(0)));
  L01_CHECK_CLOSE(yg, y, 1e-5, 1e-5);
  Tensor dx = cpu.backward(g);
  Tensor dxg = gpu->backward(g.to(mgpu::Device::cuda(0)));
  L01_CHECK_CLOSE(dxg, dx, 1e-5, 1e-5);
  L01_CHECK_CLOSE(gpu->parameter("weight").grad, cpu.weight().grad, 1e-5, 1e-5);
  L01_CHECK_CLOSE(gpu->parameter("bias").grad, cpu.bias().grad, 1e-5, 1e-5);
}
