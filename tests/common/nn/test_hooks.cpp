// Grad-ready hooks: once per parameter per backward, with the final gradient, in the
// order backward reaches the layers (what DDP's buckets rely on).
#include <map>

#include "mgpu/nn/all.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using nntest::values;

namespace {
std::shared_ptr<Sequential> small_cnn() {
  manual_seed(11);
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(1, 3, 3, 1, 1), std::make_shared<BatchNorm2d>(3),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
      std::make_shared<Linear>(12, 5), std::make_shared<ReLU>(), std::make_shared<Linear>(5, 2)});
}
}  // namespace

TEST_CASE("grad-ready hooks fire once per parameter per backward with the final gradient",
          "[nn][hooks]") {
  auto net = small_cnn();
  net->parameter("5.bias").set_requires_grad(false);  // a frozen parameter: never ready
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> seen;
  for (auto& [name, p] : net->named_parameters())
    p->add_grad_ready_hook([&order, &seen](Parameter& q) {
      order.push_back(q.name());
      seen[q.name()] = values(q.grad);
    });
  Tensor x = nntest::uniform_tensor({4, 1, 4, 4}, 3, DType::f32);
  Tensor g = nntest::uniform_tensor({4, 2}, 4, DType::f32);

  for (int round = 1; round <= 2; ++round) {
    INFO("backward number " << round << " (the second accumulates)");
    order.clear();
    net->forward(x);
    net->backward(g);
    // Backward reaches the last layer first, and in each layer the bias before the weight:
    // PyTorch's autograd order, which DDP's rebuilt buckets follow.
    CHECK(order == std::vector<std::string>{"7.bias", "7.weight", "5.weight", "1.bias",
                                            "1.weight", "0.bias", "0.weight"});
    for (auto& [name, p] : net->named_parameters()) {
      if (!p->requires_grad()) continue;
      CHECK(seen[name] == values(p->grad));  // what the hook saw is what backward left
    }
  }
}

TEST_CASE("removed hooks no longer fire; empty hooks are refused", "[nn][hooks]") {
  auto net = small_cnn();
  Parameter& w = net->parameter("7.weight");
  int calls = 0;
  const auto handle = w.add_grad_ready_hook([&](Parameter&) { ++calls; });
  Tensor x = nntest::uniform_tensor({2, 1, 4, 4}, 5, DType::f32);
  net->forward(x);
  net->backward(Tensor::full({2, 2}, 1.0));
  CHECK(calls == 1);
  w.remove_grad_ready_hook(handle);
  CHECK(w.num_grad_ready_hooks() == 0);
  net->forward(x);
  net->backward(Tensor::full({2, 2}, 1.0));
  CHECK(calls == 1);
  CHECK_THROWS(w.remove_grad_ready_hook(handle));
  CHECK_THROWS(w.add_grad_ready_hook(Parameter::GradReadyHook{}));
}

TEST_CASE("zero_grad keeps gradient storage, so views into it stay valid", "[nn][hooks]") {
  manual_seed(12);
  Linear lin(3, 2);
  // DDP-style: the gradient becomes a view into one flat buffer.
  Tensor flat = Tensor::zeros({8});
  lin.weight().grad = flat.view(0, {2, 3});
  lin.bias().grad = flat.view(6, {2});
  lin.forward(Tensor::full({1, 3}, 1.0));
  lin.backward(Tensor::full({1, 2}, 1.0));
  CHECK(values(flat) == std::vector<double>(8, 1.0));
  lin.zero_grad();
  CHECK(values(flat) == std::vector<double>(8, 0.0));
  CHECK(lin.weight().grad.shares_storage(flat));
}
