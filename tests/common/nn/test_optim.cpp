// SGD and AdamW against their update formulas written out here in double, and their state.
#include <cmath>

#include "mgpu/copy.h"
#include "mgpu/optim/all.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using nntest::values;

namespace {
/// A parameter with values v and a settable gradient.
Parameter make_param(const std::string& name, const std::vector<double>& v) {
  return Parameter(name, Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}));
}
void set_grad(Parameter& p, const std::vector<double>& g) {
  copy_(p.grad, Tensor::from_vector(g, p.value.shape()));
}
const std::vector<std::vector<double>> kGrads = {{0.5, -1.0, 2.0}, {0.1, 0.2, -0.3}, {-1.5, 0.0, 0.7}};
}  // namespace

TEST_CASE("SGD with momentum and weight decay follows PyTorch's formula", "[optim][sgd]") {
  for (double momentum : {0.0, 0.9})
    for (double wd : {0.0, 0.01}) {
      INFO("momentum " << momentum << ", weight decay " << wd);
      Parameter p = make_param("w", {1.0, -2.0, 3.0});
      optim::SGD opt({&p}, {0.1, momentum, wd});
      std::vector<double> w = {1.0, -2.0, 3.0}, buf(3);
      for (int step = 0; step < 3; ++step) {
        set_grad(p, kGrads[step]);
        opt.step();
        for (int i = 0; i < 3; ++i) {
          const double d = kGrads[step][i] + wd * w[i];
          buf[i] = step == 0 ? d : momentum * buf[i] + d;  // the first step: buf = d
          w[i] -= 0.1 * (momentum != 0 ? buf[i] : d);
        }
        const auto got = values(p.value);
        for (int i = 0; i < 3; ++i) CHECK(got[i] == Approx(w[i]).epsilon(1e-6));
      }
      CHECK(opt.state().count("w.momentum_buffer") == (momentum != 0 ? 1u : 0u));
    }
}

TEST_CASE("AdamW follows the decoupled-weight-decay formula with bias correction",
          "[optim][adamw]") {
  Parameter p = make_param("layer.weight", {1.0, -2.0, 3.0});
  p.value = p.value.to(DType::f64);
  p.grad = p.grad.to(DType::f64);
  optim::AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  optim::AdamW opt({&p}, o);
  std::vector<double> w = {1.0, -2.0, 3.0}, m(3), v(3);
  for (int t = 1; t <= 3; ++t) {
    copy_(p.grad, Tensor::from_vector(kGrads[t - 1], {3}));
    opt.step();
    for (int i = 0; i < 3; ++i) {
      const double g = kGrads[t - 1][i];
      w[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      const double mhat = m[i] / (1 - std::pow(o.beta1, t));
      const double vhat = v[i] / (1 - std::pow(o.beta2, t));
      w[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
    }
    const auto got = values(p.value);
    for (int i = 0; i < 3; ++i) CHECK(got[i] == Approx(w[i]).epsilon(1e-9));
  }
  CHECK(opt.state().at("layer.weight.step").item() == 3);
  CHECK(values(opt.state().at("layer.weight.exp_avg"))[0] == Approx(m[0]).epsilon(1e-12));
}

TEST_CASE("optimizer state saves and loads by name; frozen parameters are skipped",
          "[optim][state]") {
  Parameter a = make_param("a", {1, 2, 3}), b = make_param("b", {4, 5, 6});
  b.set_requires_grad(false);
  optim::SGD opt({&a, &b}, {0.1, 0.9, 0});
  set_grad(a, kGrads[0]);
  opt.step();
  CHECK(values(b.value) == std::vector<double>{4, 5, 6});
  auto saved = opt.state();
  REQUIRE(saved.size() == 1);
  saved.at("a.momentum_buffer") = saved.at("a.momentum_buffer").clone();

  // Resume: a fresh optimizer with the saved state takes the same next step.
  Parameter a2 = make_param("a", values(a.value));
  optim::SGD resumed({&a2}, {0.1, 0.9, 0});
  resumed.load_state(saved);
  set_grad(a, kGrads[1]);
  set_grad(a2, kGrads[1]);
  opt.step();
  resumed.step();
  CHECK(values(a2.value) == values(a.value));

  CHECK_THROWS_WITH(resumed.load_state({{"a.exp_avg", Tensor::zeros({3})}}),
                    Catch::Contains("not a state"));
  CHECK_THROWS_WITH(resumed.load_state({{"a.momentum_buffer", Tensor::zeros({4})}}),
                    Catch::Contains("but the parameter is f64[3]"));
  Parameter dup = make_param("a", {0, 0, 0});
  CHECK_THROWS_WITH(optim::SGD({&a, &dup}, {}), Catch::Contains("two parameters are named 'a'"));
}
