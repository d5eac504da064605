// Lesson 03, task 1: a model split across devices computes what the whole model computes.
#include "model_parallel_test_util.h"

using namespace lesson03_test;

TEST_CASE("task1: split_model puts each slice of layers on its device", "[03_model_parallel][task1][points:3]") {
  auto model = small_model(1);
  const std::vector<Device> devices = cpus(3);
  std::vector<l03::Stage> stages = l03::split_model(*model, {2, 5}, devices);
  REQUIRE(stages.size() == 3);
  const std::vector<std::size_t> first = {0, 2, 5}, count = {2, 3, 2};
  for (std::size_t k = 0; k < 3; ++k) {
    INFO("stage " << k);
    CHECK(stages[k].device == devices[k]);
    CHECK(stages[k].first_layer == first[k]);
    REQUIRE(stages[k].layers.size() == count[k]);
    for (std::size_t i = 0; i < count[k]; ++i) {
      CHECK(stages[k].layers[i].get() == model->at(first[k] + i).get());  // shared, not copied
      for (nn::Parameter* p : stages[k].layers[i]->parameters()) CHECK(p->value.device() == devices[k]);
    }
  }
  // The model still owns every parameter, wherever it now lives.
  CHECK(model->parameter("0.weight").value.device() == Device::cpu(0));
  CHECK(model->parameter("4.weight").value.device() == Device::cpu(1));
  CHECK(model->parameter("6.bias").value.device() == Device::cpu(2));
}

TEST_CASE("task1: split outputs equal the unsplit model's (K = 1..4)", "[03_model_parallel][task1][points:3]") {
  for (int k = 1; k <= 4; ++k) {
    INFO(k << " stages");
    auto model = small_model(2);
    auto reference = model->clone();
    const Tensor x = random_tensor({9, 5}, static_cast<unsigned>(k));
    std::vector<l03::Stage> stages = l03::split_model(*model, boundaries_for(k), cpus(k));
    const Tensor out = l03::forward_through(stages, x);
    CHECK(out.device() == Device::cpu(k - 1));
    CHECK(max_rel_diff(out, reference->forward(x)) < 1e-13);
    model->clear_saved();
    reference->clear_saved();
  }
}

TEST_CASE("task1: gradients flow back across the devices (naive schedule)", "[03_model_parallel][task1][points:3]") {
  for (int k = 2; k <= 4; ++k) {
    INFO(k << " stages");
    auto model = small_model(3);
    auto reference = model->clone();
    const Tensor x = random_tensor({7, 5}, 10u + static_cast<unsigned>(k));
    const Tensor labels = random_labels(7, 4, 20u + static_cast<unsigned>(k));
    const double want = full_batch_step(*reference, x, labels);

    std::vector<l03::Stage> stages = l03::split_model(*model, boundaries_for(k), cpus(k));
    model->zero_grad();
    nn::CrossEntropyLoss loss;
    const Tensor logits = l03::forward_through(stages, x);
    CHECK(std::fabs(loss.forward(logits, labels.to(logits.device())).item() - want) < 1e-13);
    const Tensor grad_x = l03::backward_through(stages, loss.backward());
    CHECK(grad_x.device() == Device::cpu(0));
    CHECK(grad_x.shape() == x.shape());
    check_same_grads(*model, *reference, 1e-13);
  }
}

TEST_CASE("task1: bad boundaries are clear errors", "[03_model_parallel][task1][points:1]") {
  auto model = small_model(4);
  CHECK(contains(error_of([&] { l03::split_model(*model, {0}, cpus(2)); }), "boundary"));
  CHECK(contains(error_of([&] { l03::split_model(*model, {7}, cpus(2)); }), "boundary"));
  CHECK(contains(error_of([&] { l03::split_model(*model, {4, 2}, cpus(3)); }), "increasing"));
  CHECK(contains(error_of([&] { l03::split_model(*model, {2}, cpus(3)); }), "boundaries"));
  // and a good split still works
  CHECK(l03::split_model(*model, {1, 6}, cpus(3)).back().layers.size() == 1);
}

TEST_CASE("a stage refuses an input on another device", "[03_model_parallel]") {
  l03::Stage stage;
  stage.device = Device::cpu(1);
  stage.layers.push_back(std::make_shared<nn::ReLU>());
  CHECK(contains(error_of([&] { stage.forward(random_tensor({2, 2}, 1)); }), "cpu:1"));
}

TEST_CASE("balanced_boundaries gives each stage a share of the parameters", "[03_model_parallel]") {
  auto model = small_model(5);
  const std::vector<std::size_t> cuts = l03::balanced_boundaries(*model, 3);
  REQUIRE(cuts.size() == 2);
  CHECK(cuts[0] >= 1);
  CHECK(cuts[0] < cuts[1]);
  CHECK(cuts[1] < model->size());
  CHECK(l03::balanced_boundaries(*model, 1).empty());
}
