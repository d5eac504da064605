// Lesson 01, task 3: the training step against the same step written out with the
// library's reference modules, the evaluation loop, and overfitting one batch.
#include "single_gpu_test_util.h"
#include "mgpu/data/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/rng.h"

using namespace lesson01_test;
namespace nn = mgpu::nn;
namespace l01 = mgpu::lesson01;

namespace {

std::shared_ptr<nn::Sequential> reference_mlp() {
  nn::manual_seed(7);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 4)});
}

Tensor random_labels(std::int64_t n, std::int64_t classes, std::uint64_t seed) {
  std::vector<std::int64_t> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    y[static_cast<std::size_t>(i)] = mgpu::random_u32(seed, static_cast<std::uint64_t>(i)) % classes;
  return Tensor::from_vector(y, {n});
}

}  // namespace

TEST_CASE("task3: a training step on fixed data matches the reference to 1e-6",
          "[01_single_gpu][task3][points:3]") {
  auto reference = reference_mlp();
  auto model = reference->clone();  // same weights
  mgpu::optim::SGD ref_opt(reference->parameters(), {0.1, 0.9, 0.0});
  mgpu::optim::SGD opt(model->parameters(), {0.1, 0.9, 0.0});
  nn::CrossEntropyLoss ref_loss, loss_fn;
  const Tensor x = uniform_tensor({32, 8}, 1, DType::f32, -2, 2);
  const Tensor y = random_labels(32, 4, 2);
  for (int step = 1; step <= 3; ++step) {
    INFO("step " << step);
    // The reference step, written out.
    ref_opt.zero_grad();
    Tensor logits = reference->forward(x);
    const double loss = ref_loss.forward(logits, y).item();
    reference->backward(ref_loss.backward());
    ref_opt.step();
    const std::int64_t correct = l01::count_correct(logits, y);

    const l01::StepResult r = l01::train_step(*model, loss_fn, opt, x, y);
    CHECK(r.loss == Approx(loss).epsilon(1e-6));
    CHECK(r.correct == correct);
    CHECK(r.samples == 32);
    auto ref_params = reference->named_parameters();
    auto params = model->named_parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << params[i].first);
      L01_CHECK_CLOSE(params[i].second->value, ref_params[i].second->value, 1e-6, 1e-6);
    }
  }
}

TEST_CASE("task3: evaluate gives the mean loss and accuracy over uneven batches, in eval mode",
          "[01_single_gpu][task3][points:2]") {
  nn::manual_seed(8);
  nn::Sequential model({std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4, 3),
                        std::make_shared<nn::BatchNorm1d>(3)});
  // Running statistics that differ from any batch's: eval mode must use them.
  mgpu::fill_(model.buffer("2.running_mean"), 0.3);
  mgpu::fill_(model.buffer("2.running_var"), 2.0);
  auto ds = std::make_shared<mgpu::data::SyntheticDataset>(10, Shape{1, 2, 2}, 3, 4);
  mgpu::data::DataLoaderOptions o;
  o.batch_size = 4;  // batches of 4, 4, 2
  o.shuffle = false;
  mgpu::data::DataLoader loader(ds, o);

  // Expected: the whole set in one eval-mode forward.
  Tensor x, y;
  mgpu::data::load_range(*ds, 0, 10, x, y);
  auto copy = model.clone();
  copy->eval();
  Tensor logits = copy->forward(x);
  nn::CrossEntropyLoss ce;
  const double loss = ce.forward(logits, y).item();
  const double accuracy = static_cast<double>(l01::count_correct(logits, y)) / 10.0;

  const l01::EvalResult r = l01::evaluate(model, loader);
  CHECK(r.samples == 10);
  CHECK(r.loss == Approx(loss).epsilon(1e-6));
  CHECK(r.accuracy == Approx(accuracy).epsilon(1e-12));
  CHECK(model.is_training());  // back in training mode
  CHECK(values(model.buffer("2.running_mean")) == std::vector<double>(3, static_cast<double>(0.3f)));
  CHECK(model.buffer("2.num_batches_tracked").item() == 0);
}

TEST_CASE("task3: overfitting a batch of 64 reaches 100% train accuracy",
          "[01_single_gpu][task3][points:2]") {
  // Everything of the learner's together: their Linear in the lesson's MLP, their SGD,
  // their train_step. Noisy data (noise 3 on prototypes in [-1, 1]) that a model can only
  // fit by memorising.
  nn::manual_seed(9);
  auto model = mgpu::nn::make_model("mlp");
  mgpu::optim::SGD opt(model->parameters(), {0.05, 0.9});
  nn::CrossEntropyLoss loss_fn;
  mgpu::data::SyntheticDataset ds(64, {1, 28, 28}, 10, 11, mgpu::data::Split::train, 3.0f);
  Tensor x, y;
  mgpu::data::load_range(ds, 0, 64, x, y);
  double first_loss = 0, last_loss = 0;
  std::int64_t correct = 0;
  int step = 0;
  for (; step < 300 && correct < 64; ++step) {
    const l01::StepResult r = l01::train_step(*model, loss_fn, opt, x, y);
    if (step == 0) first_loss = r.loss;
    last_loss = r.loss;
    correct = r.correct;
  }
  INFO("steps: " << step << ", loss " << first_loss << " -> " << last_loss);
  CHECK(correct == 64);
  CHECK(last_loss < first_loss);
}
