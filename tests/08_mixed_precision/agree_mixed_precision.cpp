// Lesson 08's reference (solutions/08_mixed_precision) against its twins in the library,
// in one process, on the graded tests' inputs: update_scale beside amp::update_scale,
// GradScaler::unscale_ beside amp::GradScaler's, Linear beside nn::Linear; the same bits on
// the CPU. train_step has no twin in the library: its graded tests compare it with the six
// steps written out. Not graded (agreement_tests in lessons/meson.build).
#include <cfloat>
#include <cstring>

#include "agree_scalers.h"
#include "mgpu/amp/scaling.h"

using namespace mptest;

namespace {

/// Both rules from the same state; the same scale (bit for bit) and tracker after.
void check_update(float scale, std::int32_t tracker, bool found_inf, double growth,
                  double backoff, std::int64_t interval) {
  CAPTURE(scale, tracker, found_inf, growth, backoff, interval);
  float ref_scale = scale, lib_scale = scale;
  std::int32_t ref_tracker = tracker, lib_tracker = tracker;
  l08::update_scale(ref_scale, ref_tracker, found_inf, growth, backoff, interval);
  amp::update_scale(lib_scale, lib_tracker, found_inf, growth, backoff, interval);
  CHECK(std::memcmp(&ref_scale, &lib_scale, sizeof(float)) == 0);
  CHECK(ref_tracker == lib_tracker);
}

/// The reference's Linear and the library's, with the same weights.
struct LinearPair {
  std::shared_ptr<l08::Linear> ref;
  std::shared_ptr<nn::Linear> lib;
  LinearPair(std::int64_t in, std::int64_t out, bool bias = true) {
    nn::manual_seed(12);
    ref = std::make_shared<l08::Linear>(in, out, bias);
    nn::manual_seed(12);
    lib = std::make_shared<nn::Linear>(in, out, bias);
  }
  /// forward of both (inside a region of `dtype` unless f32): the same output.
  void forward(const Tensor& x, DType dtype) {
    Tensor y_ref, y_lib;
    std::size_t cache_ref = 0, cache_lib = 0;
    if (dtype == DType::f32) {
      y_ref = ref->forward(x);
      y_lib = lib->forward(x);
    } else {
      {
        amp::Autocast region(dtype);
        y_ref = ref->forward(x);
        cache_ref = amp::autocast_cache_size();
      }
      {
        amp::Autocast region(dtype);
        y_lib = lib->forward(x);
        cache_lib = amp::autocast_cache_size();
      }
    }
    CHECK_SAME_BITS(y_ref, y_lib);
    CHECK(cache_ref == cache_lib);
  }
  /// backward of both: the same dx and parameter gradients.
  void backward(const Tensor& g) {
    CHECK_SAME_BITS(ref->backward(g), lib->backward(g));
    CHECK_SAME_BITS(ref->weight().grad, lib->weight().grad);
    if (ref->has_bias()) CHECK_SAME_BITS(ref->bias().grad, lib->bias().grad);
  }
};

}  // namespace

TEST_CASE("agreement: update_scale, reference and library", "[08_mixed_precision][agreement]") {
  // The graded cases ...
  check_update(65536.f, 0, false, 2.0, 0.5, 3);
  check_update(65536.f, 2, false, 2.0, 0.5, 3);
  check_update(65536.f, 1, true, 2.0, 0.5, 3);
  check_update(std::ldexp(1.f, 127), 0, false, 2.0, 0.5, 1);
  check_update(FLT_MAX, 4, false, 1.5, 0.5, 5);
  check_update(3.f, 1, false, 1.1, 0.3, 2);
  check_update(static_cast<float>(3.0 * 1.1), 7, true, 1.1, 0.3, 10);
  // ... and every combination of their values.
  for (float scale : {65536.f, 3.f, std::ldexp(1.f, 127), FLT_MAX, 1e-30f})
    for (std::int32_t tracker : {0, 1, 2, 4, 7})
      for (bool found_inf : {false, true})
        for (double growth : {2.0, 1.1, 1.5})
          for (double backoff : {0.5, 0.3})
            for (std::int64_t interval : {1, 2, 3, 5, 10})
              check_update(scale, tracker, found_inf, growth, backoff, interval);
}

TEST_CASE("agreement: unscale_, reference and library, on the graded scripts",
          "[08_mixed_precision][agreement]") {
  SECTION("a real scaled backward, then a scale that is not a power of two") {
    UnscalePair p({}, nullptr, 3);
    const Tensor x = random({5, 4}, 11);
    const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 1, 0}, {5});
    p.both("scaled backward", [&](amp::GradScaler& s, Toy& t) {
      nn::CrossEntropyLoss loss;
      loss.forward(t.layer->forward(x), y);
      t.layer->backward(s.scale(loss.backward()));
      return std::string();
    });
    p.both("step", step);
    p.both("update", update);
    p.both("scale", scale_one);
    p.both("update(3)", [](amp::GradScaler& s, Toy&) {
      s.update(3.0);
      return std::string();
    });
    p.both("scale", scale_one);
    p.both("gradients 5", set_grads(5.f));
    p.both("unscale_", unscale);
  }
  SECTION("inf, NaN, then a clean iteration") {
    UnscalePair p;
    for (const auto& grads : {set_grads(1.f, kInf), set_grads(kNaN), set_grads(16384.f)}) {
      p.both("scale", scale_one);
      p.both("gradients", grads);
      p.both("step", step);
      p.both("update", update);
    }
  }
  SECTION("misuse: step before scale, unscale_ twice, unscale_ after step") {
    UnscalePair p;
    p.both("step before scale", step);
    p.both("scale", scale_one);
    p.both("unscale_", unscale);
    p.both("unscale_ again", unscale);
    p.both("step", step);
    p.both("unscale_ after step", unscale);
    p.both("update", update);
    p.both("scale", scale_one);
    p.both("unscale_ in a new iteration", unscale);
    p.both("step", step);
    p.both("update", update);
  }
  SECTION("fp16 gradients are refused") {
    UnscalePair p({}, nullptr, 2);
    p.both("layer to f16", [](amp::GradScaler&, Toy& t) {
      t.layer->to(DType::f16);
      return std::string();
    });
    p.both("scale", scale_one);
    p.both("unscale_", unscale);
  }
  SECTION("no process group, and the interval-3 sequence") {
    amp::GradScalerOptions o;
    o.growth_interval = 3;
    UnscalePair p(o);
    for (bool inf : {false, false, true, false, false, false, false}) {
      p.both("scale", scale_one);
      p.both("gradients", inf ? set_grads(1.f, kInf) : set_grads(2.f));
      p.both("unscale_", unscale);
      p.both("step", step);
      p.both("update", update);
    }
  }
}

TEST_CASE("agreement: Linear, reference and library", "[08_mixed_precision][agreement]") {
  SECTION("outside a region") {
    LinearPair p(16, 8);
    p.forward(random({4, 16}, 1), DType::f32);
    p.backward(random({4, 8}, 2));
  }
  SECTION("inside f16 and bf16 regions") {
    for (DType t : {DType::f16, DType::bf16}) {
      INFO(dtype_name(t));
      LinearPair forward_only(24, 8);
      forward_only.forward(random({5, 24}, 3), t);
      LinearPair p(12, 6);
      fill_(p.ref->weight().grad, 0.5);  // an earlier backward's contribution
      fill_(p.lib->weight().grad, 0.5);
      p.forward(random({3, 12}, 5), t);
      p.backward(random({3, 6}, 6));
    }
  }
  SECTION("two micro-batches in one bf16 region, and the hooks") {
    LinearPair p(8, 4);
    int ready_ref = 0, ready_lib = 0;
    for (nn::Parameter* q : p.ref->parameters()) q->add_grad_ready_hook([&](nn::Parameter&) { ++ready_ref; });
    for (nn::Parameter* q : p.lib->parameters()) q->add_grad_ready_hook([&](nn::Parameter&) { ++ready_lib; });
    Tensor y[2][2];
    {
      amp::Autocast region(DType::bf16);
      y[0][0] = p.ref->forward(random({2, 8}, 1));
      y[0][1] = p.ref->forward(random({2, 8}, 2));
    }
    {
      amp::Autocast region(DType::bf16);
      y[1][0] = p.lib->forward(random({2, 8}, 1));
      y[1][1] = p.lib->forward(random({2, 8}, 2));
    }
    CHECK_SAME_BITS(y[0][0], y[1][0]);
    CHECK_SAME_BITS(y[0][1], y[1][1]);
    p.backward(random({2, 4}, 3));
    p.backward(random({2, 4}, 4));
    CHECK(ready_ref == ready_lib);
  }
  SECTION("fp16 underflow without a scale, and with one") {
    LinearPair p(4, 2, /*bias=*/false);
    const Tensor x = Tensor::full({1, 4}, 1.0), g = Tensor::full({1, 2}, 1e-8);
    p.forward(x, DType::f16);
    p.backward(g);
    p.forward(x, DType::f16);
    p.backward(scale(g, 65536.0));
  }
  SECTION("an MLP trained one epoch under bf16") {
    amp::GradScalerOptions off;
    off.enabled = false;
    amp::GradScaler s1(off), s2(off);
    auto ref = small_mlp(l08::make_linear), lib = small_mlp(nullptr);
    const RunResult a = train_small_mlp(*ref, s1, l08::Precision::bf16, 1, bf16_reference_step);
    const RunResult b = train_small_mlp(*lib, s2, l08::Precision::bf16, 1, bf16_reference_step);
    CHECK(a.last_loss == b.last_loss);
    CHECK(a.test_acc == b.test_acc);
    const auto rp = ref->parameters(), lp = lib->parameters();
    REQUIRE(rp.size() == lp.size());
    for (std::size_t i = 0; i < rp.size(); ++i) CHECK_SAME_BITS(rp[i]->value, lp[i]->value);
  }
}
