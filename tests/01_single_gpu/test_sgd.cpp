// Lesson 01, task 2: SGD with momentum and weight decay, against the update formula
// written out here, over 3 steps.
#include "single_gpu_test_util.h"
#include "mgpu/copy.h"

using namespace lesson01_test;
using mgpu::optim::SGD;
using mgpu::nn::Parameter;

namespace {

const std::vector<std::vector<double>> kGrads = {
    {0.5, -1.0, 2.0, 0.25}, {0.1, 0.2, -0.3, 0.0}, {-1.5, 0.0, 0.7, 1.0}};

/// Runs 3 steps of the learner's SGD and of the formula; checks the weights after each.
void check_three_steps(double lr, double momentum, double wd) {
  INFO("lr " << lr << ", momentum " << momentum << ", weight_decay " << wd);
  Parameter p("w", Tensor::from_vector<double>({1.0, -2.0, 3.0, 0.5}, {4}));
  SGD opt({&p}, {lr, momentum, wd});
  std::vector<double> w = {1.0, -2.0, 3.0, 0.5}, buf(4);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();  // as a training loop does; must not disturb the momentum buffer
    mgpu::copy_(p.grad, Tensor::from_vector(kGrads[step], {4}));
    opt.step();
    for (int i = 0; i < 4; ++i) {
      const double d = kGrads[step][i] + wd * w[i];
      buf[i] = step == 0 ? d : momentum * buf[i] + d;
      w[i] -= lr * (momentum != 0 ? buf[i] : d);
    }
    INFO("after step " << step + 1);
    const auto got = values(p.value);
    for (int i = 0; i < 4; ++i) CHECK(got[i] == Approx(w[i]).epsilon(1e-12));
    // The gradient is the model's, not the optimizer's scratch space.
    CHECK(values(p.grad) == kGrads[step]);
  }
}

}  // namespace

TEST_CASE("task2: SGD without momentum is p -= lr * g", "[01_single_gpu][task2][points:1]") {
  check_three_steps(0.1, 0.0, 0.0);
}

TEST_CASE("task2: SGD with momentum matches the update formula over 3 steps",
          "[01_single_gpu][task2][points:3]") {
  check_three_steps(0.1, 0.9, 0.0);
  check_three_steps(0.05, 0.5, 0.0);
}

TEST_CASE("task2: SGD with momentum and weight decay matches the formula over 3 steps",
          "[01_single_gpu][task2][points:2]") {
  check_three_steps(0.1, 0.9, 0.01);
  check_three_steps(0.2, 0.0, 0.1);
}

TEST_CASE("task2: SGD skips frozen parameters and names its momentum state",
          "[01_single_gpu][task2][points:1]") {
  Parameter a("a", Tensor::from_vector<double>({1, 2}, {2}));
  Parameter b("b", Tensor::from_vector<double>({3, 4}, {2}));
  b.set_requires_grad(false);
  SGD opt({&a, &b}, {0.5, 0.9});
  mgpu::copy_(a.grad, Tensor::from_vector<double>({1, 1}, {2}));
  opt.step();
  CHECK(values(a.value) == std::vector<double>{0.5, 1.5});
  CHECK(values(b.value) == std::vector<double>{3, 4});
  REQUIRE(opt.state().count("a.momentum_buffer") == 1);
  CHECK(values(opt.state().at("a.momentum_buffer")) == std::vector<double>{1, 1});
  CHECK(opt.state().count("b.momentum_buffer") == 0);
}
