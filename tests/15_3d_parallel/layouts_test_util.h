// Shared by lesson 15's layout tests (CPU and GPU): a small f64 GPT every rank builds the
// same, the layouts of a world size, and three training steps of one layout against one
// process training the unsplit model.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "error_measures.h"
#include "groups.h"
#include "mgpu/copy.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/grid/grid.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace layouts_test {

using namespace mgpu;
using namespace mgpu::testing;
namespace grid = mgpu::parallel::grid;
namespace gpt = mgpu::parallel::gpt;
namespace pp = mgpu::parallel::pp;
namespace tpar = mgpu::parallel::tp;

constexpr double kTol = 1e-12;
constexpr int kSteps = 3;
constexpr std::int64_t kT = 4, kMicroRows = 1;  // every micro-batch: 1 sequence of 4 tokens

// `blocks` blocks of C = 8 in 4 heads, 11 tokens (padded under TP 2 and 4): TP up to 4
// fits. A layout gets one block per virtual stage (two without a pipeline): every block
// costs each micro-batch 4 collectives under TP, and 8 ranks share 2 cores here.
inline nn::GPTConfig tiny_config(std::int64_t blocks = 8) {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = kT;
  c.n_layer = blocks;
  c.n_head = 4;
  c.n_embd = 8;
  return c;
}

// The f64 model every rank builds the same, its biases and LayerNorms random too.
inline std::unique_ptr<nn::GPT> tiny_gpt(std::int64_t blocks) {
  nn::manual_seed(15);
  auto g = std::make_unique<nn::GPT>(tiny_config(blocks));
  g->to(DType::f64);
  std::uint64_t salt = 1;
  for (auto& [name, p] : g->named_parameters()) {
    std::vector<double> v(static_cast<std::size_t>(p->value.numel()));
    for (auto& x : v) {
      salt = salt * 6364136223846793005ULL + 1442695040888963407ULL;
      x = 0.3 * (static_cast<double>(salt >> 11) / 9007199254740992.0 - 0.5);
      if (name.find("ln_") != std::string::npos && name.find("weight") != std::string::npos) x += 1;
    }
    Tensor r = Tensor::from_vector(v, p->value.shape());
    copy_(p->value, r);
  }
  return g;
}

// Batch `index` of `rows` sequences: ids and next-token targets, fixed by the index.
inline std::pair<Tensor, Tensor> batch(std::int64_t index, std::int64_t rows) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * kT)), tg(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(index) * 5 + i * i) % 11);
    tg[i] = static_cast<std::int64_t>((i * 3 + static_cast<std::size_t>(index) * 2 + 1) % 11);
  }
  return {Tensor::from_vector(ids, {rows, kT}), Tensor::from_vector(tg, {rows, kT})};
}


// This rank's part of a full parameter tensor under TP (lesson 13's cut).
inline Tensor my_part(const std::string& name, const Tensor& full, int P, int r) {
  if (P == 1) return full;
  const nn::GPTConfig c = tiny_config();
  const std::int64_t D = c.n_embd / c.n_head;
  const tpar::ShardRange heads = tpar::head_shard(c.n_head, P, r);
  const tpar::ShardRange hidden = tpar::shard_range(4 * c.n_embd, P, r);
  auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with("attn.c_attn.weight") || ends_with("attn.c_attn.bias"))
    return tpar::qkv_head_rows(full, heads, D);
  if (ends_with("attn.c_proj.weight")) return tpar::take_columns(full, {heads.begin * D, heads.end * D});
  if (ends_with("mlp.c_fc.weight") || ends_with("mlp.c_fc.bias")) return full.slice(hidden.begin, hidden.end).clone();
  if (ends_with("mlp.c_proj.weight")) return tpar::take_columns(full, hidden);
  return full;
}

struct Layout {
  grid::GridShape shape;
  pp::ScheduleKind schedule;
  int v = 1;
  std::string str() const {
    std::ostringstream s;
    s << shape.str() << ", " << pp::schedule_name(schedule) << ", v " << v;
    return s.str();
  }
};

// The layouts of `world` ranks a test runs: task 1's (GPipe, 1F1B) or task 2's (interleaved).
inline std::vector<Layout> layouts(int world, bool interleaved) {
  using K = pp::ScheduleKind;
  std::vector<Layout> all;
  if (world == 8)
    all = {{{2, 2, 2}, K::one_f_one_b}, {{1, 2, 4}, K::one_f_one_b}, {{4, 2, 1}, K::one_f_one_b},
           {{1, 1, 8}, K::gpipe},       {{2, 1, 4}, K::interleaved, 2}, {{1, 2, 4}, K::interleaved, 2}};
  else if (world == 4)
    all = {{{2, 1, 2}, K::one_f_one_b}, {{1, 2, 2}, K::gpipe}, {{1, 4, 1}, K::one_f_one_b},
           {{1, 1, 4}, K::one_f_one_b}, {{1, 1, 4}, K::interleaved, 2}, {{2, 1, 2}, K::interleaved, 4}};
  else if (world == 3)
    all = {{{1, 1, 3}, K::one_f_one_b}, {{3, 1, 1}, K::gpipe}, {{1, 1, 3}, K::interleaved, 2}};
  else if (world == 2)
    all = {{{1, 1, 2}, K::gpipe}, {{1, 2, 1}, K::one_f_one_b}, {{1, 1, 2}, K::interleaved, 4}};
  else
    all = {{{world, 1, 1}, K::one_f_one_b}};
  std::vector<Layout> out;
  for (const Layout& l : all)
    if ((l.schedule == K::interleaved) == interleaved) out.push_back(l);
  return out;
}

// Three steps of `layout` (its model on `device`) against one process on the CPU, on every
// rank.
inline void check_layout(const Layout& layout, const Device& device = Device::cpu()) {
  INFO(layout.str() << " on " << device.str());
  const grid::ProcessGrid g(layout.shape, "mpi", device, quiet_options(test_timeout_s()));
  const int D = layout.shape.dp, P = layout.shape.tp, p = layout.shape.pp;
  const int m = p == 1 ? 2 : p;  // a multiple of p, as interleaving needs
  const std::int64_t blocks = std::max(2, p * layout.v);
  auto full = tiny_gpt(blocks);
  auto source = tiny_gpt(blocks);
  source->to(device);
  gpt::GptPlan plan;  // lesson 15's: the embedding whole, the head split over TP
  plan.shape = layout.shape;
  plan.schedule = layout.schedule;
  plan.virtual_stages = layout.v;
  plan.micro_batches = m;
  gpt::ParallelGpt model(*source, plan, g);
  // SGD with momentum: its update is linear in the gradients, so the weights stay as close
  // as they are (AdamW divides by sqrt(v) and turns a gradient that is zero up to rounding,
  // such as the key bias's, into a full step of either sign).
  optim::SGDOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  optim::SGD opt(model.parameters(), sgd), full_opt(full->parameters(), sgd);
  for (int s = 0; s < kSteps; ++s) {
    INFO("step " << s);
    const auto [ids, targets] = batch(s * D + g.coords().dp, m * kMicroRows);
    const gpt::StepReport rep = model.train_step(ids.to(device), targets.to(device));
    full->zero_grad();
    double ref = 0;
    for (int d = 0; d < D; ++d) {
      const auto [i, t] = batch(s * D + d, m * kMicroRows);
      ref += nn::gpt_loss_step(*full, i, t) / D;
    }
    for (nn::Parameter* q : full->parameters()) scale_(q->grad, 1.0 / D);
    CHECK(std::abs(rep.loss - ref) < kTol * std::abs(ref));
    for (const auto& [name, q] : model.named_parameters()) {
      INFO("parameter " << name);
      const std::string full_name = name.rfind("lm_head.", 0) == 0 ? "transformer.wte.weight" : name;
      const Tensor want = my_part(name, full->parameter(full_name).grad, P, g.coords().tp);
      REQUIRE(q->grad.shape() == want.shape());
      CHECK(max_rel_diff(q->grad, want) < kTol);
    }
    opt.step();
    full_opt.step();
  }
  for (const auto& [name, q] : model.named_parameters()) {
    INFO("parameter " << name << " after " << kSteps << " steps");
    const std::string full_name = name.rfind("lm_head.", 0) == 0 ? "transformer.wte.weight" : name;
    CHECK(max_rel_diff(q->value, my_part(name, full->parameter(full_name).value, P, g.coords().tp)) < kTol);
  }
}

}  // namespace layouts_test
