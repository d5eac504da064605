// Lesson 08, task 2: unscale_ in one process - the division by the scale, the skip on
// inf/NaN, and the misuse errors. The agreement across ranks: test_unscale_mpi.cpp.
#include "mp_test_util.h"

using namespace mptest;

TEST_CASE("task2: the optimizer steps with the real gradients, bit for bit",
          "[08_mixed_precision][task2][points:2]") {
  // Scale 2^16 up and 2^-16 down is exact in f32: the scaled step equals the plain one.
  Toy scaled(3), plain(3);
  amp::GradScaler scaler;
  const Tensor x = random({5, 4}, 11);
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 1, 0}, {5});
  nn::CrossEntropyLoss loss_a, loss_b;
  loss_a.forward(scaled.layer->forward(x), y);
  scaled.layer->backward(scaler.scale(loss_a.backward()));
  CHECK(scaler.step(*scaled.sgd));
  scaler.update();
  loss_b.forward(plain.layer->forward(x), y);
  plain.layer->backward(loss_b.backward());
  plain.sgd->step();
  CHECK(scaled.layer->weight().grad.to_vector<float>() ==
        plain.layer->weight().grad.to_vector<float>());
  CHECK(scaled.weights() == plain.weights());
  // A scale that is not a power of two: the gradients are multiplied by 1/scale computed
  // in double and rounded to float.
  scaler.scale(Tensor::full({}, 1.0));
  scaler.update(3.0);
  scaler.scale(Tensor::full({}, 1.0));
  scaled.set_grads(5.f);
  scaler.unscale_(*scaled.sgd);
  CHECK(scaled.layer->weight().grad.to_vector<float>()[0] == 5.f * amp::inverse_scale(3.f));
  CHECK(scaled.layer->bias().grad.to_vector<float>()[2] == 5.f * amp::inverse_scale(3.f));
}

TEST_CASE("task2: an inf gradient leaves the parameters unchanged and halves the scale",
          "[08_mixed_precision][task2][points:2]") {
  amp::GradScaler scaler;
  Toy toy;
  const auto before = toy.weights();
  const auto bias_before = toy.layer->bias().value.to_vector<float>();
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(1.f);
  toy.layer->bias().grad.data<float>()[1] = kInf;  // one element of one gradient
  CHECK_FALSE(scaler.step(*toy.sgd));
  CHECK(scaler.last_step_skipped());
  scaler.update();
  CHECK(toy.weights() == before);
  CHECK(toy.layer->bias().value.to_vector<float>() == bias_before);
  CHECK(scaler.get_scale() == 32768.0);
  // A NaN is caught the same way; a clean iteration then steps.
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(kNaN);
  CHECK_FALSE(scaler.step(*toy.sgd));
  scaler.update();
  CHECK(scaler.get_scale() == 16384.0);
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(16384.f);
  CHECK(scaler.step(*toy.sgd));
  scaler.update();
  CHECK(toy.weights() != before);
  CHECK(scaler.growth_tracker() == 1);
}

TEST_CASE("task2: misuse: unscale_ twice, unscale_ after step, step before scale, fp16 gradients",
          "[08_mixed_precision][task2][points:2]") {
  Toy toy;
  amp::GradScaler scaler;
  CHECK_THROWS_WITH(scaler.step(*toy.sgd), Catch::Contains("scaler.scale"));
  scaler.scale(Tensor::full({}, 1.0));
  scaler.unscale_(*toy.sgd);
  CHECK_THROWS_WITH(scaler.unscale_(*toy.sgd),
                    Catch::Contains("unscale_() has already been called on this optimizer "
                                    "since the last update()"));
  CHECK(scaler.step(*toy.sgd));
  CHECK_THROWS_WITH(scaler.unscale_(*toy.sgd),
                    Catch::Contains("unscale_() is being called after step()"));
  scaler.update();
  scaler.scale(Tensor::full({}, 1.0));
  scaler.unscale_(*toy.sgd);  // a new iteration: allowed again
  scaler.step(*toy.sgd);
  scaler.update();

  Toy half(2);
  half.layer->to(DType::f16);
  amp::GradScaler fresh;
  fresh.scale(Tensor::full({}, 1.0));
  CHECK_THROWS_WITH(fresh.unscale_(*half.sgd), Catch::Contains("FP16 gradients"));
}

TEST_CASE("task2: without a process group no collective is needed",
          "[08_mixed_precision][task2][points:1]") {
  // A world of one: the flags stay per device (here one, cpu:0) and decide alone.
  amp::GradScaler scaler;
  Toy toy;
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(2.f);
  scaler.unscale_(*toy.sgd);
  CHECK(toy.layer->weight().grad.to_vector<float>()[3] == 2.f / 65536.f);
  CHECK(scaler.step(*toy.sgd));
  scaler.update();
  CHECK(scaler.growth_tracker() == 1);
}
