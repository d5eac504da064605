// mgpu::parallel::moe's MoE layer on one process (its EP group a LocalGroup): f64 gradients
// against central differences (the auxiliary loss included, dropless and with drops), the
// output against a token-by-token sum of the experts, names, statistics, the balancing
// bias, and ([gpu]) CUDA against the CPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "gradient_check.h"
#include "moe_test_util.h"
#include "gpu.h"
#include "mgpu/copy.h"
#include "mgpu/host_reads.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/moe/load_balance.h"
#include "mgpu/parallel/moe/moe_layer.h"
#include "mgpu/parallel/moe/routing.h"
#include "random_data.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace moe = mgpu::parallel::moe;

namespace {

moe::MoEConfig moe1_config(double capacity_factor, double aux_alpha) {
  moe::MoEConfig c;
  c.dim = 6;
  c.hidden = 8;
  c.experts = 4;
  c.k = 2;
  c.capacity_factor = capacity_factor;
  c.aux_alpha = aux_alpha;
  return c;
}

// The layer's gradients of L = <y, w> + aux against central differences, for x and every
// parameter; returns the largest relative difference (max_rel_diff) of them all.
double moe1_gradcheck(moe::MoE& m, Tensor x, unsigned seed) {
  m.zero_grad();
  const Tensor y = m.forward(x);
  const Tensor w = uniform_tensor(y.shape(), seed);
  const Tensor dx = m.backward(w);
  auto loss = [&] {
    const Tensor out = m.forward(x);
    m.clear_saved();
    return dot(out, w) + m.stats().aux_loss;
  };
  double worst = max_rel_diff(dx, numeric_gradient(x, loss));
  for (auto& [name, p] : m.named_parameters()) {
    INFO("parameter " << name);
    const Tensor analytic = p->grad.clone();
    const double d = max_rel_diff(analytic, numeric_gradient(p->value, loss));
    CHECK(d < 1e-7);
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace

TEST_CASE("moe layer: parameter names are the router's and each expert's", "[moe]") {
  moe::MoE m(moe1_config(0, 0));
  std::vector<std::string> names;
  for (auto& [name, p] : m.named_parameters()) names.push_back(name);
  std::vector<std::string> want{"router.weight"};
  for (int e = 0; e < 4; ++e)
    for (const char* s : {".fc1.weight", ".fc1.bias", ".fc2.weight", ".fc2.bias"})
      want.push_back("experts." + std::to_string(e) + s);
  CHECK(names == want);
  CHECK(m.router_weight().value.shape() == Shape{4, 6});
  CHECK(m.local_expert(3).parameters().at(0)->value.shape() == Shape{8, 6});
  CHECK(m.local_experts() == 4);
}

TEST_CASE("moe layer: f64 gradients equal central differences (dropless, k = 2, E = 4, aux)",
          "[moe]") {
  auto m = random_moe(moe1_config(0, 0.05), 3);
  const double worst = moe1_gradcheck(*m, random_tensor({10, 6}, 31), 32);
  CHECK(m->stats().dropped == 0);
  CHECK(m->stats().aux_loss > 0);
  WARN("largest relative difference to central differences: " << worst);
  CHECK(worst < 1e-7);
}

TEST_CASE("moe layer: f64 gradients equal central differences with dropped choices", "[moe]") {
  auto m = random_moe(moe1_config(0.5, 0.05), 4);
  const Tensor x = random_tensor({12, 6}, 41);
  m->eval();
  m->forward(x);
  m->train();
  REQUIRE(m->stats().dropped > 0);  // capacity 3 for 24 choices over 4 experts
  const double worst = moe1_gradcheck(*m, x, 42);
  WARN("largest relative difference to central differences (drops): " << worst);
  CHECK(worst < 1e-7);
}

TEST_CASE("moe layer: y[n] is the weighted sum of its kept experts' outputs", "[moe]") {
  for (double factor : {0.0, 0.75}) {
    INFO("capacity factor " << factor);
    auto m = random_moe(moe1_config(factor, 0), 5);
    const std::int64_t N = 16, M = 6, E = 4, k = 2;
    const Tensor x = random_tensor({2, N / 2, M}, 51);  // any leading shape
    const Tensor y = m->forward(x);
    m->clear_saved();
    REQUIRE(y.shape() == x.shape());
    // The routing as lesson 16's functions give it, from the router's probabilities.
    const Tensor x2 = x.reshape({N, M});
    const Tensor probs = softmax(matmul(x2, m->router_weight().value, false, true));
    const moe::Routing r = moe::route_top_k(probs, k);
    const std::int64_t cap = moe::expert_capacity(N, k, E, factor);
    const std::vector<std::int64_t> slots = moe::capacity_slots(r, cap);
    Tensor want = Tensor::zeros({N, M}, DType::f64);
    std::vector<std::int64_t> kept(E, 0);
    std::int64_t dropped = 0;
    for (std::int64_t n = 0; n < N; ++n) {
      Tensor row = want.slice(n, n + 1);
      for (std::int64_t j = 0; j < k; ++j) {
        if (slots[n * k + j] < 0) {
          ++dropped;
          continue;
        }
        const std::int32_t e = r.expert[n * k + j];
        ++kept[e];
        m->local_expert(e).eval();
        axpy_(row, r.weight[n * k + j], m->local_expert(e).forward(x2.slice(n, n + 1)));
        m->local_expert(e).train();
      }
    }
    CHECK(max_rel_diff(y.reshape({N, M}), want) < 1e-14);
    CHECK(m->stats().tokens_per_expert == kept);
    CHECK(m->stats().dropped == dropped);
    CHECK(m->stats().capacity == cap);
    CHECK(m->stats().rows_sent == N * k - dropped);
    CHECK(m->stats().rows_received == N * k - dropped);
    if (factor > 0) CHECK(dropped > 0);
  }
}

TEST_CASE("moe layer: the bias steers the choice and moves by ±γ against the load", "[moe]") {
  moe::MoEConfig c = moe1_config(0, 0);
  c.bias_gamma = 0.25;
  auto m = random_moe(c, 6);
  const Tensor x = random_tensor({20, 6}, 61);
  m->zero_grad();
  m->backward(m->forward(x));
  const std::vector<std::int64_t> load = m->stats().routed_per_expert;
  CHECK(m->load_since_update() == load);
  std::vector<double> want(4, 0.0);
  moe::update_expert_bias(want, load, 0.25);
  m->update_bias();
  CHECK(m->expert_bias() == want);
  CHECK(m->load_since_update() == std::vector<std::int64_t>(4, 0));
  // A bias of 2 on expert 3 (probabilities are < 1): every token chooses it first.
  m->set_expert_bias({0, 0, 0, 2});
  m->forward(x);
  m->clear_saved();
  CHECK(m->stats().routed_per_expert[3] == 20);
}

TEST_CASE("moe layer: an f32 layer routes in f32 and agrees with its f64 twin", "[moe]") {
  auto m64 = random_moe(moe1_config(0, 0.01), 7);
  auto m32 = std::static_pointer_cast<moe::MoE>(m64->clone());
  m32->to(DType::f32);
  const Tensor x = random_tensor({14, 6}, 71);
  const Tensor y64 = m64->forward(x), y32 = m32->forward(x.to(DType::f32));
  CHECK(y32.dtype() == DType::f32);
  CHECK(m32->stats().tokens_per_expert == m64->stats().tokens_per_expert);
  CHECK(max_rel_diff(y32, y64) < 1e-5);
  const Tensor dy = random_tensor({14, 6}, 72);
  const Tensor dx64 = m64->backward(dy), dx32 = m32->backward(dy.to(DType::f32));
  CHECK(max_rel_diff(dx32, dx64) < 1e-5);
  CHECK(max_rel_diff(m32->router_weight().grad, m64->router_weight().grad) < 1e-5);
}

TEST_CASE("moe layer on CUDA: forward and backward equal the CPU's", "[moe][gpu]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO("dtype " << dtype_name(dtype));
    for (double factor : {0.0, 0.75}) {
      auto cpu = random_moe(moe1_config(factor, 0.01), 8);
      cpu->to(dtype);
      auto gpu = std::static_pointer_cast<moe::MoE>(cpu->clone());
      gpu->to(Device::cuda(0));
      const Tensor x = random_tensor({24, 6}, 81, dtype), dy = random_tensor({24, 6}, 82, dtype);
      const Tensor y_cpu = cpu->forward(x), y_gpu = gpu->forward(x.to(Device::cuda(0)));
      CHECK(gpu->stats().tokens_per_expert == cpu->stats().tokens_per_expert);
      const Tensor dx_cpu = cpu->backward(dy), dx_gpu = gpu->backward(dy.to(Device::cuda(0)));
      const double tol = 10 * gpu_rtol(dtype);
      CHECK(max_rel_diff(y_gpu.to(Device::cpu()), y_cpu) < tol);
      CHECK(max_rel_diff(dx_gpu.to(Device::cpu()), dx_cpu) < tol);
      auto gp = gpu->named_parameters();
      auto cp = cpu->named_parameters();
      for (std::size_t i = 0; i < cp.size(); ++i) {
        INFO("parameter " << cp[i].first);
        CHECK(max_rel_diff(gp[i].second->grad.to(Device::cpu()), cp[i].second->grad) < tol);
      }
    }
  }
}

TEST_CASE("moe layer: without an input gradient the parameter gradients are the same",
          "[moe]") {
  auto with = random_moe(moe1_config(0.75, 0.01), 9);
  auto without = std::static_pointer_cast<moe::MoE>(with->clone());
  without->set_input_requires_grad(false);
  const Tensor x = random_tensor({12, 6}, 91), dy = random_tensor({12, 6}, 92);
  with->forward(x);
  without->forward(x);
  CHECK(with->backward(dy).defined());
  CHECK_FALSE(without->backward(dy).defined());
  auto a = with->named_parameters();
  auto b = without->named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << a[i].first);
    CHECK(same_bits(a[i].second->grad, b[i].second->grad));
  }
}

TEST_CASE("moe layer: the host reads of a step are the routing's, a fixed number", "[moe]") {
  auto m = random_moe(moe1_config(0.75, 0.01), 10);
  const Tensor x = random_tensor({12, 6}, 101), dy = random_tensor({12, 6}, 102);
  m->forward(x);
  m->backward(dy);
  const std::int64_t before = host_reads();
  m->forward(x);
  const std::int64_t forward_reads = host_reads() - before;
  m->backward(dy);
  // probs read by route_top_k, switch_aux_loss and the layer (for the renormalisation's
  // backward), the counts by exchange_counts; the backward reads nothing.
  CHECK(forward_reads == 4);
  CHECK(host_reads() - before == forward_reads);
}
