// GradScaler and its kernels against PyTorch's semantics: the update rule, the fused
// check-and-unscale, the per-optimizer stages and their errors, state_dict.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "mgpu/amp/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "reference_models.h"
#include "scale_update_sequence.h"

using namespace mgpu;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// One Linear 4 -> 3 and an SGD on it; step() with the gradients set by hand.
using Toy = testing::LinearWithSgd;

}  // namespace

TEST_CASE("update_scale: PyTorch's sequence for growth_interval 3", "[amp][scaler]") {
  mgpu::testing::check_interval_3_sequence();
}

TEST_CASE("update_scale: the scale never grows to inf", "[amp][scaler]") {
  float scale = std::ldexp(1.f, 127);  // 2^127: doubling it overflows float
  std::int32_t tracker = 0;
  amp::update_scale(scale, tracker, false, 2.0, 0.5, 1);
  CHECK(scale == std::ldexp(1.f, 127));
  CHECK(tracker == 0);  // the tracker restarts even when the growth is refused
  scale = FLT_MAX;
  amp::update_scale(scale, tracker, false, 1.0001, 0.5, 1);
  CHECK(scale == FLT_MAX);
  // Growth that stays finite is taken (a non-power-of-two factor rounds through double).
  scale = 3.0f;
  amp::update_scale(scale, tracker, false, 1.1, 0.5, 1);
  CHECK(scale == static_cast<float>(3.0 * 1.1));
}

TEST_CASE("inverse_scale: the reciprocal in double, rounded to float", "[amp][scaler]") {
  CHECK(amp::inverse_scale(65536.f) == std::ldexp(1.f, -16));
  CHECK(amp::inverse_scale(3.f) == static_cast<float>(1.0 / 3.0));
}

TEST_CASE("non_finite_check_and_unscale_: values, flags, every float dtype", "[amp][scaler]") {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    INFO(dtype_name(t));
    Tensor a = Tensor::from_vector(std::vector<float>{1024.f, -3.f, 0.5f, 96.f}, {4}).to(t);
    Tensor b = Tensor::from_vector(std::vector<float>{8.f, 2.f}, {2}).to(t);
    Tensor found = Tensor::zeros({}, DType::f32);
    amp::non_finite_check_and_unscale_({a, b}, found, 0.25f);
    CHECK(found.item() == 0.0);
    CHECK(a.to_vector<float>() == std::vector<float>{256.f, -0.75f, 0.125f, 24.f});
    CHECK(b.to_vector<float>() == std::vector<float>{2.f, 0.5f});
    // An inf in one tensor, a NaN in another: found; every element still multiplied.
    Tensor c = Tensor::from_vector(std::vector<float>{4.f, kInf}, {2}).to(t);
    Tensor d = Tensor::from_vector(std::vector<float>{kNaN, 4.f}, {2}).to(t);
    amp::non_finite_check_and_unscale_({c}, found, 0.5f);
    CHECK(found.item() == 1.0);
    const auto cv = c.to_vector<float>();
    CHECK(cv[0] == 2.f);
    CHECK(std::isinf(cv[1]));
    // found_inf is only ever set, never cleared: a clean tensor leaves the 1 in place.
    amp::non_finite_check_and_unscale_({b}, found, 1.f);
    CHECK(found.item() == 1.0);
    Tensor found2 = Tensor::zeros({}, DType::f32);
    amp::non_finite_check_and_unscale_({d}, found2, 1.f);
    CHECK(found2.item() == 1.0);
    CHECK(d.to_vector<float>()[1] == 4.f);  // inv_scale 1: unchanged
  }
}

TEST_CASE("non_finite_check_and_unscale_: f64 gradients are multiplied in double",
          "[amp][scaler]") {
  const float inv = amp::inverse_scale(3.f);  // not a power of two: the rounding shows
  Tensor g = Tensor::from_vector(std::vector<double>{1.0 / 7.0}, {1});
  Tensor found = Tensor::zeros({}, DType::f32);
  amp::non_finite_check_and_unscale_({g}, found, inv);
  CHECK(g.to_vector<double>()[0] == (1.0 / 7.0) * static_cast<double>(inv));
  Tensor f = Tensor::from_vector(std::vector<float>{1.f / 7.f}, {1});
  amp::non_finite_check_and_unscale_({f}, found, inv);
  CHECK(f.to_vector<float>()[0] == (1.f / 7.f) * inv);
}

TEST_CASE("non_finite_check_and_unscale_: operand errors", "[amp][scaler][errors]") {
  Tensor g = Tensor::zeros({3});
  Tensor bad_flag = Tensor::zeros({2});
  CHECK_THROWS_WITH(amp::non_finite_check_and_unscale_({g}, bad_flag, 1.f),
                    Catch::Contains("found_inf") && Catch::Contains("one-element f32"));
  Tensor flag = Tensor::zeros({}, DType::f32, Device::cpu(1));
  CHECK_THROWS_WITH(amp::non_finite_check_and_unscale_({g}, flag, 1.f),
                    Catch::Contains("different devices"));
  Tensor ints = Tensor::zeros({2}, DType::i32);
  Tensor ok = Tensor::zeros({}, DType::f32);
  CHECK_THROWS_WITH(amp::non_finite_check_and_unscale_({ints}, ok, 1.f),
                    Catch::Contains("not floating"));
}

TEST_CASE("GradScaler: defaults and the interval-3 sequence through step/update", "[amp][scaler]") {
  amp::GradScaler defaults;
  CHECK(defaults.get_scale() == 65536.0);
  CHECK(defaults.get_growth_factor() == 2.0);
  CHECK(defaults.get_backoff_factor() == 0.5);
  CHECK(defaults.get_growth_interval() == 2000);
  CHECK(defaults.is_enabled());

  mgpu::testing::check_interval_3_through_scaler(65536.f, true);
}

TEST_CASE("GradScaler: an inf gradient leaves the parameters unchanged and halves the scale",
          "[amp][scaler]") {
  amp::GradScaler scaler;
  Toy toy;
  const auto before = toy.weights();
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(1.f);
  toy.layer->weight().grad.data<float>()[5] = kInf;
  CHECK_FALSE(scaler.step(*toy.sgd));
  scaler.update();
  CHECK(toy.weights() == before);
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(scaler.growth_tracker() == 0);
  // A NaN does the same.
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(kNaN);
  CHECK_FALSE(scaler.step(*toy.sgd));
  scaler.update();
  CHECK(toy.weights() == before);
  CHECK(scaler.get_scale() == 16384.0);
}

TEST_CASE("GradScaler: the step uses the unscaled gradients, bit for bit", "[amp][scaler]") {
  // Scaling by 2^16 and unscaling by 2^-16 is exact in f32 (no overflow, no underflow), so
  // the scaled step equals the plain step exactly.
  Toy scaled(3), plain(3);
  amp::GradScaler scaler;
  Tensor x = Tensor::empty({5, 4});
  uniform_(x, 11, -1.0, 1.0);
  Tensor y = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 1, 0}, {5});
  nn::CrossEntropyLoss loss_a, loss_b;
  loss_a.forward(scaled.layer->forward(x), y);
  scaled.layer->backward(scaler.scale(loss_a.backward()));
  scaler.step(*scaled.sgd);
  scaler.update();
  loss_b.forward(plain.layer->forward(x), y);
  plain.layer->backward(loss_b.backward());
  plain.sgd->step();
  CHECK(scaled.weights() == plain.weights());
  CHECK(scaled.layer->weight().grad.to_vector<float>() == plain.layer->weight().grad.to_vector<float>());
}

TEST_CASE("GradScaler: unscale_ before step lets the caller see real gradients", "[amp][scaler]") {
  amp::GradScaler scaler;
  Toy toy;
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(65536.f * 3.f);
  scaler.unscale_(*toy.sgd);
  CHECK(toy.layer->weight().grad.to_vector<float>()[0] == 3.f);
  CHECK(scaler.step(*toy.sgd));  // does not unscale a second time
  CHECK(toy.layer->weight().grad.to_vector<float>()[0] == 3.f);
  scaler.update();
}

TEST_CASE("GradScaler: misuse errors", "[amp][scaler][errors]") {
  Toy toy;
  SECTION("step, unscale_ or update before the first scale()") {
    amp::GradScaler scaler;
    CHECK_THROWS_WITH(scaler.step(*toy.sgd),
                      Catch::Contains("Attempted step but _scale is None") && Catch::Contains("scaler.scale"));
    CHECK_THROWS_WITH(scaler.unscale_(*toy.sgd), Catch::Contains("Attempted unscale_ but _scale is None"));
    CHECK_THROWS_WITH(scaler.update(), Catch::Contains("Attempted update but _scale is None"));
  }
  SECTION("unscale_ twice before update") {
    amp::GradScaler scaler;
    scaler.scale(Tensor::full({}, 1.0));
    scaler.unscale_(*toy.sgd);
    CHECK_THROWS_WITH(scaler.unscale_(*toy.sgd),
                      Catch::Contains("already been called on this optimizer since the last update"));
    scaler.step(*toy.sgd);
    scaler.update();
    scaler.scale(Tensor::full({}, 1.0));
    scaler.unscale_(*toy.sgd);  // fine again after update()
  }
  SECTION("unscale_ after step, step twice") {
    amp::GradScaler scaler;
    scaler.scale(Tensor::full({}, 1.0));
    scaler.step(*toy.sgd);
    CHECK_THROWS_WITH(scaler.unscale_(*toy.sgd), Catch::Contains("after step()"));
    CHECK_THROWS_WITH(scaler.step(*toy.sgd),
                      Catch::Contains("step() has already been called since the last update()"));
  }
  SECTION("update without a check") {
    amp::GradScaler scaler;
    scaler.scale(Tensor::full({}, 1.0));
    CHECK_THROWS_WITH(scaler.update(), Catch::Contains("no inf checks were recorded prior to update"));
  }
  SECTION("fp16 gradients") {
    amp::GradScaler scaler;
    toy.layer->to(DType::f16);
    scaler.scale(Tensor::full({}, 1.0));
    CHECK_THROWS_WITH(scaler.step(*toy.sgd),
                      Catch::Contains("Attempting to unscale FP16 gradients.") && Catch::Contains("weight"));
  }
  SECTION("no gradients at all") {
    amp::GradScaler scaler;
    for (nn::Parameter* p : toy.layer->parameters()) p->set_requires_grad(false);
    scaler.scale(Tensor::full({}, 1.0));
    CHECK_THROWS_WITH(scaler.step(*toy.sgd), Catch::Contains("no inf checks were recorded for this optimizer"));
  }
  SECTION("bad factors") {
    amp::GradScalerOptions o;
    o.growth_factor = 1.0;
    CHECK_THROWS_WITH(amp::GradScaler(o), Catch::Contains("growth factor must be > 1.0"));
    o = {};
    o.backoff_factor = 1.0;
    CHECK_THROWS_WITH(amp::GradScaler(o), Catch::Contains("backoff factor must be < 1.0"));
    o.enabled = false;  // not checked when disabled, as in PyTorch
    CHECK_NOTHROW(amp::GradScaler(o));
  }
}

TEST_CASE("GradScaler: bf16 gradients are allowed", "[amp][scaler]") {
  // Only f16 is refused (PyTorch checks float16 alone).
  amp::GradScaler scaler;
  Toy toy;
  toy.layer->to(DType::bf16);
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(2.f);
  CHECK(scaler.step(*toy.sgd));
}

TEST_CASE("GradScaler: disabled does nothing but step", "[amp][scaler]") {
  amp::GradScalerOptions o;
  o.enabled = false;
  amp::GradScaler scaler(o);
  Toy toy;
  Tensor loss = Tensor::full({}, 2.0);
  Tensor same = scaler.scale(loss);
  CHECK(same.shares_storage(loss));
  toy.set_grads(kInf);  // not checked: the step runs (and corrupts the weights)
  CHECK(scaler.step(*toy.sgd));
  CHECK(std::isinf(toy.weights()[0]));
  scaler.update();
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.state_dict().empty());
  scaler.load_state_dict({});  // a no-op when disabled
}

TEST_CASE("GradScaler: the combined check of two optimizers", "[amp][scaler]") {
  amp::GradScaler scaler;
  Toy a(1), b(2);
  scaler.scale(Tensor::full({}, 1.0));
  a.set_grads(1.f);
  b.set_grads(kNaN);
  CHECK(scaler.step(*a.sgd));
  CHECK_FALSE(scaler.step(*b.sgd));
  scaler.update();  // one optimizer overflowed: the scale backs off
  CHECK(scaler.get_scale() == 32768.0);
}

TEST_CASE("GradScaler: update(new_scale)", "[amp][scaler]") {
  amp::GradScaler scaler;
  scaler.scale(Tensor::full({}, 1.0));
  scaler.update(1024.0);
  CHECK(scaler.get_scale() == 1024.0);
  scaler.update(0.1);  // stored as a float
  CHECK(scaler.get_scale() == static_cast<double>(0.1f));
}

TEST_CASE("GradScaler: state_dict and load_state_dict", "[amp][scaler]") {
  amp::GradScalerOptions o;
  o.growth_interval = 5;
  amp::GradScaler scaler(o);
  Toy toy;
  for (int i = 0; i < 3; ++i) {
    scaler.scale(Tensor::full({}, 1.0));
    toy.set_grads(i == 0 ? kInf : 1.f);
    scaler.step(*toy.sgd);
    scaler.update();
  }
  const amp::ScalerState s = scaler.state_dict();
  CHECK(s.size() == 5);
  CHECK(s.at("scale") == 32768.0);
  CHECK(s.at("growth_factor") == 2.0);
  CHECK(s.at("backoff_factor") == 0.5);
  CHECK(s.at("growth_interval") == 5.0);
  CHECK(s.at("_growth_tracker") == 2.0);

  // A fresh scaler takes the state before its first scale() (PyTorch's _init_scale)...
  amp::GradScaler fresh;
  fresh.load_state_dict(s);
  CHECK(fresh.get_scale() == 32768.0);
  CHECK(fresh.growth_tracker() == 2);
  CHECK(fresh.get_growth_interval() == 5);
  // ...and continues the same sequence: three more clean steps reach the interval.
  for (int i = 0; i < 3; ++i) {
    fresh.scale(Tensor::full({}, 1.0));
    toy.set_grads(1.f);
    fresh.step(*toy.sgd);
    fresh.update();
  }
  CHECK(fresh.get_scale() == 65536.0);
  CHECK(fresh.growth_tracker() == 0);
  // An initialized scaler takes it too.
  fresh.load_state_dict(s);
  CHECK(fresh.get_scale() == 32768.0);
  CHECK(fresh.growth_tracker() == 2);

  CHECK_THROWS_WITH(fresh.load_state_dict({}),
                    Catch::Contains("empty") && Catch::Contains("disabled instance"));
  amp::ScalerState missing = s;
  missing.erase("_growth_tracker");
  CHECK_THROWS_WITH(fresh.load_state_dict(missing), Catch::Contains("'_growth_tracker'"));
  amp::ScalerState fractional = s;
  fractional["growth_interval"] = 2.5;
  CHECK_THROWS_WITH(fresh.load_state_dict(fractional), Catch::Contains("expected an integer"));
}
