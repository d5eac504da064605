// Lesson 08, task 3: your nn::Linear under the precision policy.
#include "mp_test_util.h"

#include <string>

using namespace mptest;

namespace {

// Values of t after a round trip through dtype: what a 16-bit operand holds.
std::vector<double> rounded(const Tensor& t, DType dtype) { return cast(t, dtype).to_vector<double>(); }

// |got - want| <= tol * (1 + |want|) for every element.
void check_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  std::size_t bad = got.size();
  for (std::size_t i = 0; i < got.size() && bad == got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) bad = i;
  if (bad != got.size()) INFO("first mismatch at " << bad << ": " << got[bad] << " vs " << want[bad]);
  CHECK(bad == got.size());
}

// Your layer, from a fixed seed.
struct Pair {
  std::shared_ptr<nn::Linear> mine;
  Pair(std::int64_t in, std::int64_t out, bool bias = true) {
    nn::manual_seed(12);
    mine = std::make_shared<nn::Linear>(in, out, bias);
  }
};

}  // namespace

TEST_CASE("task3: in a region, a frozen weight and an input that is data are left alone",
          "[08_mixed_precision][task3][points:1]") {
  Pair p(16, 8);
  p.mine->weight().set_requires_grad(false);
  p.mine->set_input_requires_grad(false);  // the first layer: its input x is data
  std::vector<std::string> fired;
  for (nn::Parameter* q : p.mine->parameters())
    q->add_grad_ready_hook([&](nn::Parameter& r) { fired.push_back(r.name()); });
  const Tensor x = random({4, 16}, 1), g = random({4, 8}, 2);
  {
    amp::Autocast region(DType::bf16);
    p.mine->forward(x);
  }
  const Tensor dx = p.mine->backward(g);
  CHECK_FALSE(dx.defined());  // no dx for data
  CHECK_FALSE(p.mine->weight().grad.defined());  // frozen: no gradient at all
  // The bias still learns, from the f32 gradient: the column sums of g.
  CHECK(p.mine->bias().grad.to_vector<float>() == sum(g, 0).to_vector<float>());
  CHECK(fired == std::vector<std::string>{"bias"});
}

TEST_CASE("task3: forward in a region: 16-bit operands, f32 sums, f32 output",
          "[08_mixed_precision][task3][points:2]") {
  for (DType t : {DType::f16, DType::bf16}) {
    INFO(dtype_name(t));
    Pair p(24, 8);
    const Tensor x = random({5, 24}, 3);
    Tensor y;
    {
      amp::Autocast region(t);
      y = p.mine->forward(x);
    }
    REQUIRE(y.dtype() == DType::f32);
    // y = round16(x) round16(W)^T + b, with the sum kept in f32: within a few f32 ulps.
    const auto xr = rounded(x, t), wr = rounded(p.mine->weight().value, t);
    const auto b = p.mine->bias().value.to_vector<double>();
    std::vector<double> want(5 * 8, 0.0);
    for (int n = 0; n < 5; ++n)
      for (int o = 0; o < 8; ++o) {
        for (int i = 0; i < 24; ++i) want[n * 8 + o] += xr[n * 24 + i] * wr[o * 24 + i];
        want[n * 8 + o] += b[o];
      }
    check_near(y.to_vector<float>(), want, 1e-6, "y");
    // Rounding the sum to 16 bits (a 16-bit output) would be off by far more than 1e-6.
    p.mine->clear_saved();
  }
}

TEST_CASE("task3: backward: f32 gradients from 16-bit operands, added into .grad",
          "[08_mixed_precision][task3][points:2]") {
  for (DType t : {DType::f16, DType::bf16}) {
    INFO(dtype_name(t));
    Pair p(12, 6);
    const Tensor x = random({3, 12}, 5), g = random({3, 6}, 6);
    fill_(p.mine->weight().grad, 0.5);  // an earlier backward's contribution: kept
    Tensor dx;
    {
      amp::Autocast region(t);
      p.mine->forward(x);
    }
    dx = p.mine->backward(g);  // backward runs outside the region, from what forward kept
    REQUIRE(dx.dtype() == DType::f32);
    REQUIRE(p.mine->weight().grad.dtype() == DType::f32);
    const auto gr = rounded(g, t), xr = rounded(x, t), wr = rounded(p.mine->weight().value, t);
    const auto gv = g.to_vector<double>();
    std::vector<double> dw(6 * 12, 0.5), want_dx(3 * 12, 0.0), db(6, 0.0);
    for (int n = 0; n < 3; ++n)
      for (int o = 0; o < 6; ++o) {
        db[o] += gv[n * 6 + o];  // the bias gradient sums the f32 gradient
        for (int i = 0; i < 12; ++i) {
          dw[o * 12 + i] += gr[n * 6 + o] * xr[n * 12 + i];
          want_dx[n * 12 + i] += gr[n * 6 + o] * wr[o * 12 + i];
        }
      }
    check_near(p.mine->weight().grad.to_vector<float>(), dw, 1e-6, "weight grad (+= 0.5)");
    check_near(dx.to_vector<float>(), want_dx, 1e-6, "dx");
    check_near(p.mine->bias().grad.to_vector<float>(), db, 1e-6, "bias grad");
  }
}

TEST_CASE("task3: the weight is cast once per region, and the hooks fire",
          "[08_mixed_precision][task3][points:1]") {
  Pair p(8, 4);
  int ready = 0;
  for (nn::Parameter* q : p.mine->parameters()) q->add_grad_ready_hook([&](nn::Parameter&) { ++ready; });
  {
    amp::Autocast region(DType::bf16);
    p.mine->forward(random({2, 8}, 1));
    p.mine->forward(random({2, 8}, 2));  // two micro-batches, one cast of W
    CHECK(amp::autocast_cache_size() == 1);
  }
  p.mine->backward(random({2, 4}, 3));
  p.mine->backward(random({2, 4}, 4));
  CHECK(ready == 4);  // weight and bias, twice
}

TEST_CASE("task3: fp16 loses gradients below 2^-24 without a scale and keeps them with one",
          "[08_mixed_precision][task3][points:1]") {
  Pair p(4, 2, /*bias=*/false);
  const Tensor x = Tensor::full({1, 4}, 1.0), g = Tensor::full({1, 2}, 1e-8);
  {
    amp::Autocast region(DType::f16);
    p.mine->forward(x);
  }
  p.mine->backward(g);
  for (float v : p.mine->weight().grad.to_vector<float>()) CHECK(v == 0.f);
  p.mine->zero_grad();
  {
    amp::Autocast region(DType::f16);
    p.mine->forward(x);
  }
  p.mine->backward(scale(g, 65536.0));
  for (float v : p.mine->weight().grad.to_vector<float>()) CHECK(v / 65536.f == Approx(1e-8).epsilon(1e-3));
}

TEST_CASE("task3: an MLP of your Linear trains under bf16 as it does in f32",
          "[08_mixed_precision][task3][points:1]") {
  auto bf16 = small_mlp(nullptr);
  auto f32 = small_mlp(nullptr);
  amp::GradScalerOptions off;
  off.enabled = false;
  amp::GradScaler s1(off), s2(off);
  const RunResult a = train_small_mlp(*bf16, s1, amp::Precision::bf16, 1, reference_step);
  const RunResult b = train_small_mlp(*f32, s2, amp::Precision::fp32, 1, reference_step);
  // bf16 keeps 8 bits of mantissa: one epoch ends within a few percent of f32's loss.
  CHECK(a.last_loss == Approx(b.last_loss).epsilon(0.05));
  CHECK(a.test_acc == Approx(b.test_acc).margin(0.05));
  CHECK(b.test_acc > 0.5);  // and it learned
}
