// The library's GPT with experts (moe_gpt.h) under a plan with EP (gpt_plan.h), under
// mpirun at 1, 2 and 4 ranks: DP = the world, EP the world (and EP 2 x 2 groups, and DP 2
// x TP 2 with EP 2, at 4; TP 2 at 2).
// Over 3 AdamW steps in f64 the loss, the auxiliary loss, every dense gradient and, on the
// ranks that hold them, the experts' gradients equal one process that runs each rank's
// windows in turn (1e-12), dropless and with capacity (a rank's capacity counts its own
// tokens, as one process's forward on that rank's windows does); the balancing biases too.
// Each step issues exactly 5 all-to-alls per MoE layer on the EP group.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "expect_error.h"
#include "groups.h"
#include "mgpu/data/text.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/parallel/gpt/moe_gpt.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace gpt = mgpu::parallel::gpt;
namespace grid = mgpu::parallel::grid;

namespace {

constexpr double kGptMoeTol = 1e-12;
constexpr std::int64_t kGptMoeVocab = 11, kGptMoeRows = 2, kGptMoeT = 8;

nn::GPTConfig gptmoe_config() {
  nn::GPTConfig c;
  c.vocab_size = kGptMoeVocab;
  c.block_size = kGptMoeT;
  c.n_layer = 4;  // MoE layers in blocks 1 and 3
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

// Rank d's windows of step k: [kGptMoeRows, T] ids and targets, tensors and host ids.
data::TextBatch gptmoe_batch(std::int64_t k, int d) {
  const auto n = static_cast<std::size_t>(kGptMoeRows * kGptMoeT);
  std::vector<std::int64_t> in(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t j = i + n * static_cast<std::size_t>(d) + 97 * static_cast<std::size_t>(k);
    in[i] = static_cast<std::int64_t>((j * 7 + j * j / 3) % kGptMoeVocab);
    out[i] = static_cast<std::int64_t>((j * 5 + 3) % kGptMoeVocab);
  }
  return {Tensor::from_vector(in, {kGptMoeRows, kGptMoeT}),
          Tensor::from_vector(out, {kGptMoeRows, kGptMoeT}), in, out};
}

gpt::MoEGptConfig gptmoe_experts(double capacity_factor) {
  gpt::MoEGptConfig m = gpt::MoEGptConfig::tiny();
  m.capacity_factor = capacity_factor;
  m.aux_alpha = gpt::MoEGptConfig::kAuxAlpha;   // both balancings at once: every path runs
  m.bias_gamma = gpt::MoEGptConfig::kBiasGamma;
  return m;
}

// One GPT with experts in f64, the same on every rank.
std::unique_ptr<nn::GPT> gptmoe_model(const gpt::MoEGptConfig& experts) {
  nn::manual_seed(5);
  auto model = std::make_unique<nn::GPT>(gptmoe_config());
  model->to(DType::f64);
  gpt::use_experts(*model, experts);
  return model;
}

// The layouts at this world size: DP the world with EP the world, and at 4 ranks EP 2 (x 2
// groups) and DP 2 x TP 2 with EP 2 (the MoE whole on each TP rank); TP 2 alone at 2 ranks.
struct GptMoeLayout {
  int dp = 1;  ///< data-parallel ranks (the windows of each step split over them)
  int tp = 1;  ///< ranks of a tensor-parallel group (attention's heads)
  int ep = 1;  ///< ranks of an EP group, consecutive data ranks
};
std::vector<GptMoeLayout> gptmoe_layouts(int W) {
  std::vector<GptMoeLayout> out{{W, 1, W}};
  if (W == 2) out.push_back({1, 2, 1});
  if (W == 4) {
    out.push_back({4, 1, 2});
    out.push_back({2, 2, 2});
  }
  return out;
}

}  // namespace

TEST_CASE("GPT with experts under DP x EP equals one process over every rank's windows",
          "[gpt][moe][ep]") {
  for (const GptMoeLayout& layout : gptmoe_layouts(group().size()))
    for (double capacity : {0.0, 1.0}) {
      const int W = layout.dp, ep = layout.ep;  // W: the data-parallel ranks
      INFO("DP " << W << " x TP " << layout.tp << " with EP " << ep << ", capacity factor "
           << capacity);
      const gpt::MoEGptConfig experts = gptmoe_experts(capacity);
      gpt::GptPlan plan;
      plan.shape = grid::GridShape{W, layout.tp};
      plan.shape.ep = ep;
      const grid::ProcessGrid g(plan.shape, "mpi", Device::cpu(),
                                quiet_options(test_timeout_s()));
      const std::unique_ptr<nn::GPT> one_model = gptmoe_model(experts);
      const std::unique_ptr<nn::GPT> full = gptmoe_model(experts);
      nn::GPT& one = *one_model;
      gpt::ParallelGpt model(*full, plan, g);
      REQUIRE(model.moe_layers().size() == 2);
      optim::AdamWOptions adam;
      adam.lr = 1e-2;
      optim::AdamW opt(model.parameters(), adam), one_opt(one.parameters(), adam);
      const int d = g.coords().dp;
      double worst_loss = 0, worst_aux = 0, worst_grad = 0, worst_expert = 0;
      std::int64_t expert_grads = 0;
      for (std::int64_t s = 0; s < 3; ++s) {
        const gpt::StepReport rep = model.train_step(gptmoe_batch(s, d));
        // One process: every rank's windows in turn, the gradients averaged.
        one.zero_grad();
        double loss = 0, aux = 0;
        for (int r = 0; r < W; ++r) {
          const data::TextBatch b = gptmoe_batch(s, r);
          loss += nn::gpt_loss_step(one, b.inputs, b.targets) / W;
          for (const auto* layer : gpt::moe_layers(one)) aux += layer->stats().aux_loss / W;
        }
        for (nn::Parameter* p : one.parameters()) scale_(p->grad, 1.0 / W);
        worst_loss = std::max(worst_loss, std::abs(rep.loss - loss));
        worst_aux = std::max(worst_aux, std::abs(rep.aux_loss - aux));
        for (const auto& [name, p] : model.named_parameters()) {
          // Under TP a split parameter holds a part (lesson 13's tests check those): the
          // whole ones here, every MoE parameter among them.
          if (p->value.shape() != one.parameter(name).value.shape()) continue;
          const double diff = max_abs_diff(p->grad, one.parameter(name).grad);
          (gpt::is_expert_parameter(name) ? worst_expert : worst_grad) =
              std::max(gpt::is_expert_parameter(name) ? worst_expert : worst_grad, diff);
          expert_grads += gpt::is_expert_parameter(name) ? 1 : 0;
        }
        // The EP all-to-alls: 3 in each layer's forward, 2 in its backward; the experts'
        // gradients in one all-reduce over the ranks that hold them (none where EP is DP).
        CHECK(rep.by_group.ep == (ep > 1 ? 5 * 2 : 0));
        CHECK(rep.by_group.expert_data == (ep > 1 && W / ep > 1 ? 1 : 0));
        CHECK(rep.traffic.all_to_all.ops == rep.by_group.ep);  // no other group's all-to-all
        CHECK((rep.traffic.all_to_all.bytes > 0) == (ep > 1));
        opt.step();
        one_opt.step();
        gpt::update_expert_biases(one);
      }
      INFO("largest |diff|: loss " << worst_loss << ", aux " << worst_aux << ", dense grads "
           << worst_grad << ", expert grads " << worst_expert);
      CHECK(all_ranks(worst_loss <= kGptMoeTol && worst_aux <= kGptMoeTol));
      CHECK(all_ranks(worst_grad <= kGptMoeTol && worst_expert <= kGptMoeTol));
      // This rank holds E/EP experts of each of the 2 layers (4 parameters each), 3 steps.
      CHECK(expert_grads == 3 * 2 * (4 / ep) * 4);
      double worst_param = 0, worst_bias = 0;
      for (const auto& [name, p] : model.named_parameters())
        if (p->value.shape() == one.parameter(name).value.shape())
          worst_param = std::max(worst_param, max_abs_diff(p->value, one.parameter(name).value));
      const auto mine = model.moe_layers(), ref = gpt::moe_layers(one);
      for (std::size_t l = 0; l < mine.size(); ++l)
        for (std::size_t e = 0; e < ref[l]->expert_bias().size(); ++e)
          worst_bias = std::max(worst_bias,
                                std::abs(mine[l]->expert_bias()[e] - ref[l]->expert_bias()[e]));
      INFO("after 3 steps: largest |diff| of a parameter " << worst_param << ", of a bias "
           << worst_bias);
      CHECK(all_ranks(worst_param <= kGptMoeTol && worst_bias == 0));
      if (layout.tp == 1)  // the formula counts TP 1's parameters
        CHECK(model.num_parameters() ==
              gpt::moe_parameter_count(gptmoe_config(), experts).per_rank(ep));
    }
}

TEST_CASE("a plan with experts refuses what it does not support, naming the fix",
          "[gpt][moe][ep]") {
  gpt::GptPlan plan;
  plan.shape = grid::GridShape{4, 2};
  plan.shape.ep = 2;
  plan.check_experts(2, 4);  // TP for attention, the MoE whole on every TP rank
  plan.sequence_parallel = true;
  CHECK(contains(error_of([&] { plan.check_experts(2, 4); }), "drop it (no SP"));
  plan.sequence_parallel = false;
  plan.shape.cp = 2;
  plan.attention = gpt::Attention::ring;
  CHECK(contains(error_of([&] { plan.check_experts(2, 4); }), "context parallelism"));
  plan = gpt::GptPlan{};
  plan.shape = grid::GridShape{4};
  plan.shape.ep = 2;
  CHECK(contains(error_of([&] { plan.check_experts(0, 4); }), "no MoE layer"));
  CHECK(contains(error_of([&] { plan.check_experts(2, 3); }), "divisors of E"));
  plan.grad_sync = gpt::GradSync::ddp;
  CHECK(contains(error_of([&] { plan.check_experts(2, 4); }), "GradSync::after_step"));
  plan.shape.ep = 3;
  CHECK(contains(error_of([&] { plan.check(gptmoe_config()); }), "multiple of --ep"));
}
