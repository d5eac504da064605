// Lesson 02, tasks 2 and 3: replicas, the broadcast of weights, the reduce-add of gradients.
#include "data_parallel_test_util.h"

#include "mgpu/copy.h"
#include "mgpu/ops.h"

using namespace lesson02_test;
namespace l02 = mgpu::lesson02;

namespace {

std::size_t parameter_bytes(nn::Module& m) {
  std::size_t n = 0;
  for (nn::Parameter* p : m.parameters()) n += p->value.nbytes();
  return n;
}

std::size_t gradient_bytes(nn::Module& m) {
  std::size_t n = 0;
  for (nn::Parameter* p : m.parameters())
    if (p->grad.defined()) n += p->grad.nbytes();
  return n;
}

}  // namespace

TEST_CASE("task2: replicate keeps the module as replica 0 and copies it to every other device",
          "[02_data_parallel][task2][points:3]") {
  auto model = small_mlp(11);
  const auto replicas = l02::replicate(model, cpus(3));
  REQUIRE(replicas.size() == 3);
  CHECK(replicas[0].get() == model.get());  // no copy on device 0: the optimizer updates it
  for (std::size_t i = 1; i < 3; ++i) {
    INFO("replica " << i);
    CHECK(replicas[i].get() != model.get());
    CHECK(replicas[i]->device() == Device::cpu(static_cast<int>(i)));
    const auto mine = replicas[i]->named_parameters();
    const auto theirs = model->named_parameters();
    REQUIRE(mine.size() == theirs.size());
    for (std::size_t j = 0; j < mine.size(); ++j) {
      CHECK(mine[j].first == theirs[j].first);
      CHECK(mine[j].second->value.device() == Device::cpu(static_cast<int>(i)));
      CHECK(!mine[j].second->value.shares_storage(theirs[j].second->value));
      CHECK(mine[j].second->value.to_vector<double>() == theirs[j].second->value.to_vector<double>());
    }
  }
}

TEST_CASE("task2: replicate refuses a module that is not on devices[0]", "[02_data_parallel][task2][points:1]") {
  auto model = small_mlp(12);
  model->to(Device::cpu(1));
  CHECK(contains(error_of([&] { l02::replicate(model, cpus(2)); }), "devices[0]"));
  model->to(Device::cpu(0));
  CHECK(l02::replicate(model, cpus(2)).size() == 2);
}

TEST_CASE("task2: broadcast copies weights, buffers and the mode from device 0",
          "[02_data_parallel][task2][points:3]") {
  auto model = small_bn_mlp(13);
  const auto replicas = l02::replicate(model, cpus(3));
  // The optimizer (here: a hand-made change) updates device 0 only ...
  for (nn::Parameter* p : model->parameters()) mgpu::scale_(p->value, 0.5);
  mgpu::fill_(model->buffer("1.running_mean"), 0.25);
  model->eval();
  CHECK(replicas[1]->parameters()[0]->value.to_vector<double>() !=
        model->parameters()[0]->value.to_vector<double>());
  // ... and the broadcast brings the replicas back in line.
  l02::Traffic traffic;
  l02::broadcast_parameters(*model, replicas, &traffic);
  for (std::size_t i = 1; i < 3; ++i) {
    INFO("replica " << i);
    const auto mine = replicas[i]->parameters();
    const auto theirs = model->parameters();
    for (std::size_t j = 0; j < mine.size(); ++j) {
      CHECK(mine[j]->value.device() == Device::cpu(static_cast<int>(i)));
      CHECK(mine[j]->value.to_vector<double>() == theirs[j]->value.to_vector<double>());
    }
    CHECK(replicas[i]->buffer("1.running_mean").to_vector<double>() ==
          model->buffer("1.running_mean").to_vector<double>());
    CHECK_FALSE(replicas[i]->is_training());
  }
  // Every replica but device 0's own received all parameters and buffers.
  std::size_t buffer_bytes = 0;
  for (auto& [name, b] : model->named_buffers()) buffer_bytes += b->nbytes();
  CHECK(traffic.bytes(l02::Phase::broadcast) == 2 * (parameter_bytes(*model) + buffer_bytes));
  CHECK(traffic.bytes_sent(Device::cpu(0)) == traffic.total());
}

TEST_CASE("task3: reduce-add sums every replica's gradient onto device 0",
          "[02_data_parallel][task3][points:4]") {
  auto model = small_mlp(14, /*frozen_bias=*/true);
  const auto replicas = l02::replicate(model, cpus(3));
  // Give replica i the gradient (i + 1) * g_j for parameter j.
  std::vector<Tensor> base;
  for (std::size_t j = 0; j < model->parameters().size(); ++j)
    base.push_back(random_tensor(model->parameters()[j]->value.shape(), 20 + static_cast<unsigned>(j)));
  for (std::size_t i = 0; i < 3; ++i) {
    const auto params = replicas[i]->parameters();
    for (std::size_t j = 0; j < params.size(); ++j) {
      if (!params[j]->grad.defined()) continue;
      Tensor g = mgpu::scale(base[j], static_cast<double>(i + 1)).to(params[j]->grad.device());
      mgpu::copy_(params[j]->grad, g);
    }
  }
  l02::Traffic traffic;
  l02::reduce_add_gradients(*model, replicas, &traffic);
  const auto params = model->parameters();
  for (std::size_t j = 0; j < params.size(); ++j) {
    INFO("parameter " << params[j]->name());
    if (!params[j]->requires_grad()) {
      CHECK_FALSE(params[j]->grad.defined());  // the frozen bias stays without a gradient
      continue;
    }
    CHECK(params[j]->grad.device() == Device::cpu(0));
    CHECK(max_rel_diff(params[j]->grad, mgpu::scale(base[j], 6.0)) < 1e-14);  // 1 + 2 + 3
  }
  // Two replicas sent one gradient each to device 0, the frozen bias excluded.
  CHECK(traffic.bytes(l02::Phase::reduce) == 2 * gradient_bytes(*model));
  CHECK(traffic.bytes_received(Device::cpu(0)) == traffic.total());
}
