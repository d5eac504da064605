// The GPT decoder: attention against a loop written out per head, the causal property (a
// later token never changes an earlier output), every gradient of attention, a block and a
// whole tiny GPT against central finite differences in f64, parameter names and counts,
// and ([gpu]) the model on CUDA against the CPU.
#include "gpu.h"
#include "mgpu/nn/all.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using nntest::check_close;
using nntest::gradcheck;
using nntest::uniform_tensor;
using nntest::values;

namespace {

GPTConfig tiny_config() { return GPTConfig{7, 5, 2, 2, 4}; }

Tensor ids_of(std::vector<std::int64_t> v, std::int64_t B, std::int64_t T) {
  return Tensor::from_vector(v, {B, T});
}

}  // namespace

TEST_CASE("causal_attention equals the attention written out per head", "[nn][gpt][attention]") {
  const std::int64_t BH = 3, T = 4, D = 2;
  const Tensor q = uniform_tensor({BH, T, D}, 1), k = uniform_tensor({BH, T, D}, 2),
               v = uniform_tensor({BH, T, D}, 3);
  const auto y = values(causal_attention(q, k, v));
  const auto qv = values(q), kv = values(k), vv = values(v);
  for (std::int64_t h = 0; h < BH; ++h)
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<double> w(static_cast<std::size_t>(t + 1));
      double z = 0;
      for (std::int64_t s = 0; s <= t; ++s) {  // keys up to t: the causal mask
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += qv[(h * T + t) * D + d] * kv[(h * T + s) * D + d];
        w[static_cast<std::size_t>(s)] = std::exp(dot / std::sqrt(double(D)));
        z += w[static_cast<std::size_t>(s)];
      }
      for (std::int64_t d = 0; d < D; ++d) {
        double want = 0;
        for (std::int64_t s = 0; s <= t; ++s) want += w[static_cast<std::size_t>(s)] / z * vv[(h * T + s) * D + d];
        CHECK(std::fabs(y[(h * T + t) * D + d] - want) < 1e-14);
      }
    }
}

TEST_CASE("attention and a block: gradients match finite differences", "[nn][gradcheck][gpt]") {
  manual_seed(3);
  CausalSelfAttention attn(4, 2);
  attn.to(DType::f64);
  gradcheck(attn, uniform_tensor({2, 3, 4}, 31), 32);
  Block block(4, 2);
  block.to(DType::f64);
  gradcheck(block, uniform_tensor({2, 3, 4}, 33), 34);
}

TEST_CASE("GPT: names as nanoGPT's, the parameter count, the causal property",
          "[nn][gpt]") {
  manual_seed(4);
  GPT gpt(tiny_config());
  gpt.to(DType::f64);
  std::int64_t count = 0;
  for (auto& [name, p] : gpt.named_parameters()) count += p->value.numel();
  CHECK(count == tiny_config().num_parameters());
  const auto names = gpt.named_parameters();
  CHECK(names.front().first == "transformer.wte.weight");
  CHECK(names[2].first == "transformer.h.0.ln_1.weight");
  CHECK(names[4].first == "transformer.h.0.attn.c_attn.weight");
  CHECK(names.back().first == "transformer.ln_f.bias");
  CHECK(GPTConfig::gpt2_small().num_parameters() == 124439808);  // GPT-2 small, head tied
  // Changing the last token changes no earlier position's logits.
  gpt.eval();
  const auto a = values(gpt.forward(ids_of({1, 2, 3, 4, 5}, 1, 5)));
  const auto b = values(gpt.forward(ids_of({1, 2, 3, 4, 0}, 1, 5)));
  for (std::size_t i = 0; i < 4 * 7; ++i) CHECK(a[i] == b[i]);
  bool last_differs = false;
  for (std::size_t i = 4 * 7; i < 5 * 7; ++i) last_differs |= a[i] != b[i];
  CHECK(last_differs);
  CHECK_THROWS_AS(gpt.forward(ids_of({1, 2, 3, 4, 5, 6}, 1, 6)), Error);  // T > block_size
}

TEST_CASE("GPT: every gradient matches finite differences, the tied table's from both uses",
          "[nn][gradcheck][gpt]") {
  manual_seed(5);
  GPT gpt(tiny_config());
  gpt.to(DType::f64);
  const Tensor ids = ids_of({1, 6, 6, 0, 3, 2, 5, 4}, 2, 4);
  const Tensor w = uniform_tensor({2, 4, 7}, 51);
  int ready = 0;
  gpt.named_parameters().front().second->add_grad_ready_hook([&](nn::Parameter&) { ++ready; });
  gpt.zero_grad();
  gpt.forward(ids);
  gpt.backward(w);
  CHECK(ready == 1);  // the token table's gradient is announced once, when it is whole
  auto loss = [&] {
    const double l = nntest::dot(gpt.forward(ids), w);
    gpt.clear_saved();
    return l;
  };
  for (auto& [name, p] : gpt.named_parameters()) {
    INFO(name);
    check_close(p->grad.clone(), nntest::numeric_gradient(p->value, loss), 1e-5, 1e-8, name);
  }
}

TEST_CASE("GPT on CUDA matches the CPU", "[nn][gpt][gpu]") {
  manual_seed(6);
  GPT cpu(GPTConfig{11, 8, 2, 2, 8});
  auto gpu = cpu.clone();
  gpu->to(Device::cuda(0));
  std::vector<std::int64_t> v(16);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>((3 * i + 1) % 11);
  const Tensor ids = ids_of(v, 2, 8);
  check_close(gpu->forward(ids.to(Device::cuda(0))).to(Device::cpu()), cpu.forward(ids), 1e-4,
              1e-5, "logits");
  const Tensor g = uniform_tensor({2, 8, 11}, 61, DType::f32);
  cpu.backward(g);
  gpu->backward(g.to(Device::cuda(0)));
  auto cp = cpu.named_parameters(), gp = gpu->named_parameters();
  for (std::size_t i = 0; i < cp.size(); ++i)
    check_close(gp[i].second->grad.to(Device::cpu()), cp[i].second->grad, 1e-4, 1e-5, cp[i].first);
}
