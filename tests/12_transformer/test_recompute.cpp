// Lesson 12, task 3: activation recomputation. Under full and attn a small GPT's loss and
// every parameter gradient are bit-identical to none's; the activation memory a block keeps,
// measured by the allocator, is the chapter's formula; and recomputation's extra work,
// measured (timings printed, never asserted).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "transformer_test_util.h"

using namespace mgpu;
using namespace transformer_test;
using nn::RecomputePolicy;

namespace {

const RecomputePolicy kPolicies[] = {RecomputePolicy::none, RecomputePolicy::full,
                                     RecomputePolicy::attn};

/// A model of config c under `policy`, its weights from seed (the same for every policy).
std::unique_ptr<nn::GPT> make_gpt(const nn::GPTConfig& c, RecomputePolicy policy, DType dtype,
                                  std::uint64_t seed) {
  nn::manual_seed(seed);
  auto model = std::make_unique<nn::GPT>(c);
  model->to(dtype);
  nn::set_recompute(*model, policy);
  return model;
}

/// Every parameter's gradient, by name.
std::vector<std::pair<std::string, Tensor>> grads_of(nn::GPT& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : model.named_parameters()) out.emplace_back(name, p->grad.clone());
  return out;
}

}  // namespace

TEST_CASE("task3: full and attn give none's loss and every gradient, bit for bit",
          "[12_transformer][task3][points:3]") {
  // f32, f64, and f32 weights with the forward's GEMMs in bf16 (lesson 08's autocast, the
  // backward outside the region): the recomputed forward must run as the first one did.
  const std::pair<DType, DType> runs[] = {
      {DType::f32, DType::f32}, {DType::f64, DType::f32}, {DType::f32, DType::bf16}};
  for (const auto& [dtype, autocast] : runs) {
    const nn::GPTConfig c = small_gpt(3);
    const Tensor ids = token_ids(3, c.block_size, c.vocab_size, 7);
    auto reference = make_gpt(c, RecomputePolicy::none, dtype, 12);
    const double want_loss = loss_and_grads(*reference, ids, autocast);
    const auto want = grads_of(*reference);
    for (RecomputePolicy policy : {RecomputePolicy::full, RecomputePolicy::attn}) {
      INFO(nn::recompute_name(policy) << " in " << dtype_name(dtype) << ", GEMMs in "
                                      << dtype_name(autocast == DType::f32 ? dtype : autocast));
      auto model = make_gpt(c, policy, dtype, 12);
      const double loss = loss_and_grads(*model, ids, autocast);
      CHECK(loss == want_loss);
      const auto got = grads_of(*model);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO(got[i].first);
        CHECK(got[i].first == want[i].first);
        CHECK(same_bits(got[i].second, want[i].second));
      }
      CHECK(model->saved_forwards() == 0);  // nothing of the step is kept after it
    }
  }
}

TEST_CASE("task3: two forwards, then their backwards in reverse order (gradient "
          "accumulation), under every policy",
          "[12_transformer][task3][points:1]") {
  const nn::GPTConfig c = small_gpt(2);
  const Tensor a = token_ids(2, 6, c.vocab_size, 21), b = token_ids(2, 6, c.vocab_size, 22);
  const Tensor wa = mgpu::testing::random_tensor({2, 6, c.vocab_size}, 23, DType::f32);
  const Tensor wb = mgpu::testing::random_tensor({2, 6, c.vocab_size}, 24, DType::f32);
  std::vector<std::pair<std::string, Tensor>> want;
  for (RecomputePolicy policy : kPolicies) {
    INFO(nn::recompute_name(policy));
    auto model = make_gpt(c, policy, DType::f32, 31);
    const Tensor ya = model->forward(a);
    const Tensor yb = model->forward(b);
    CHECK(model->saved_forwards() == 2);
    model->backward(wb);
    model->backward(wa);
    CHECK(model->saved_forwards() == 0);
    const auto got = grads_of(*model);
    if (policy == RecomputePolicy::none) {
      want = got;
      continue;
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO(got[i].first);
      CHECK(same_bits(got[i].second, want[i].second));
    }
  }
}

TEST_CASE("task3: activation memory per block, measured by the allocator, is the chapter's "
          "formula within 5%",
          "[12_transformer][task3][points:2]") {
  // gpt-tiny's width and heads, a shorter context: B = 4, T = 64, C = 128, 4 heads.
  nn::GPTConfig c = nn::GPTConfig::tiny(65);
  c.block_size = 64;
  const std::int64_t B = 4, T = 64, C = c.n_embd, H = c.n_head;
  const Tensor ids = token_ids(B, T, c.vocab_size, 41);
  for (RecomputePolicy policy : kPolicies) {
    INFO(nn::recompute_name(policy));
    double kept[2] = {0, 0};  // after the forward, with 1 and 2 blocks
    for (int layers = 1; layers <= 2; ++layers) {
      c.n_layer = layers;
      auto model = make_gpt(c, policy, DType::f32, 51);
      const std::size_t before = host_bytes();
      Tensor logits = model->forward(ids);
      kept[layers - 1] = static_cast<double>(host_bytes() - before);
      // The step completes, and nothing stays kept.
      model->backward(Tensor::full(logits.shape(), 1e-3));
      CHECK(model->saved_forwards() == 0);
    }
    // The second block adds exactly one block's activations (and nothing else).
    const double per_block = kept[1] - kept[0];
    const double formula = formula_bytes(policy, B, T, C, H);
    std::printf("activation memory per block, %s: measured %.0f bytes, formula %.0f (%.2f%%)\n",
                nn::recompute_name(policy), per_block, formula, 100.0 * (per_block / formula - 1));
    CHECK(std::fabs(per_block / formula - 1) < 0.05);
  }
}

TEST_CASE("task3: recomputation's extra work, measured (timings printed, not asserted)",
          "[12_transformer][task3][points:1]") {
  // gpt-tiny (4 layers, 4 heads, C = 128, T = 128), 4 sequences.
  const nn::GPTConfig c = nn::GPTConfig::tiny(65);
  const std::int64_t B = 4, T = c.block_size;
  const Tensor ids = token_ids(B, T, c.vocab_size, 61);
  double seconds[3] = {INFINITY, INFINITY, INFINITY};
  std::size_t allocations[3] = {0, 0, 0}, peak[3] = {0, 0, 0};
  std::unique_ptr<nn::GPT> models[3];
  for (int i = 0; i < 3; ++i) {
    models[i] = make_gpt(c, kPolicies[i], DType::f32, 71);
    loss_and_grads(*models[i], ids);  // warm: the allocator's cache, the threads
  }
  // The policies take turns, a step each, and each keeps its fastest step: a busy machine
  // slows them alike.
  for (int round = 0; round < 4; ++round)
    for (int i = 0; i < 3; ++i) {
      reset_peak_memory(Device::cpu());
      const std::size_t base = host_bytes();
      const std::size_t count = memory_stats(Device::cpu()).allocations;
      const auto t0 = std::chrono::steady_clock::now();
      loss_and_grads(*models[i], ids);
      seconds[i] = std::min(
          seconds[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      allocations[i] = memory_stats(Device::cpu()).allocations - count;
      peak[i] = memory_stats(Device::cpu()).peak_allocated - base;
    }
  // Behaviour: full runs every block's forward twice, attn the attention core twice, so
  // each allocates more per step than none; and each peaks lower.
  CHECK(allocations[1] > allocations[0]);
  CHECK(allocations[2] > allocations[0]);
  CHECK(peak[1] < peak[0]);
  CHECK(peak[2] < peak[0]);
  for (int i = 0; i < 3; ++i)
    std::printf("recompute %s: %.1f ms a step (%.2fx none's), peak %.2f MB above the model, "
                "%zu allocations a step\n",
                nn::recompute_name(kPolicies[i]), 1e3 * seconds[i], seconds[i] / seconds[0],
                peak[i] / 1e6, allocations[i]);
}
