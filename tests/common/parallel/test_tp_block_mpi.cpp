// mgpu::parallel::tp's GPT block under mpirun (1 to 4 ranks): the block split by heads and
// hidden features, with and without sequence parallelism, against nn::Block in one process
// (f64, every output and gradient); the collectives per block; the replicated gradients
// that SP leaves partial; the vocabulary-parallel cross-entropy against the full one.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "groups.h"
#include "mgpu/allocator.h"
#include "mgpu/copy.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"
#include "mgpu/parallel/tp/vocab_parallel_embedding.h"
#include "random_data.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace tpar = mgpu::parallel::tp;

namespace {

constexpr double kTol = 1e-12;
// C = 24 in 12 heads of 2, T = 12: 2, 3 and 4 ranks divide both the heads and T.
constexpr std::int64_t kB = 2, kT = 12, kC = 24, kHeads = 12;

// An f64 block whose every parameter (biases and LayerNorms too) is random, the same on
// every rank.
std::shared_ptr<nn::Block> f64_block() {
  nn::manual_seed(5);
  auto b = std::make_shared<nn::Block>(kC, kHeads);
  b->to(DType::f64);
  unsigned salt = 100;
  for (auto& [name, p] : b->named_parameters()) {
    const bool ln = name.find("ln_") != std::string::npos && name.find("weight") != std::string::npos;
    Tensor r = random_tensor(p->value.shape(), ++salt);
    scale_(r, 0.4);
    if (ln) add_(r, Tensor::full(p->value.shape(), 1.0, DType::f64));
    copy_(p->value, r);
  }
  return b;
}

// This rank's part of a full gradient: rows of c_attn (its heads' q, k and v) and of c_fc,
// columns of the c_proj weights, everything else whole.
Tensor my_part(tpar::ParallelBlock& blk, const std::string& name, const Tensor& full) {
  const int P = blk.group().size(), r = blk.group().rank();
  auto& attn = static_cast<tpar::ParallelSelfAttention&>(*blk.children().at(1).second);
  const tpar::ShardRange heads = attn.head_range();
  const std::int64_t D = kC / kHeads, width = heads.size() * D;
  if (name.rfind("attn.c_attn.", 0) == 0) {
    const bool w = name.find("weight") != std::string::npos;
    Tensor out = Tensor::empty(w ? Shape{3 * width, kC} : Shape{3 * width}, DType::f64);
    for (std::int64_t part = 0; part < 3; ++part) {
      Tensor dst = out.slice(part * width, (part + 1) * width);
      copy_(dst, full.slice(part * kC + heads.begin * D, part * kC + heads.end * D));
    }
    return out;
  }
  if (name == "attn.c_proj.weight") return tpar::take_columns(full, {heads.begin * D, heads.end * D});
  const tpar::ShardRange hidden = tpar::shard_range(4 * kC, P, r);
  if (name.rfind("mlp.c_fc.", 0) == 0) return full.slice(hidden.begin, hidden.end).clone();
  if (name == "mlp.c_proj.weight") return tpar::take_columns(full, hidden);
  return full;
}

struct Run {
  Tensor y, dx;  // the block's output and input gradient, this rank's part
};

// One forward and backward of the split block on this rank's part of x and dy.
Run run_split(tpar::ParallelBlock& blk, const Tensor& x, const Tensor& dy) {
  const bool sp = blk.sequence_parallel();
  Run out;
  out.y = blk.forward(sp ? tpar::scatter_sequence(x, blk.group()) : x.clone());
  out.dx = blk.backward(sp ? tpar::scatter_sequence(dy, blk.group()) : dy.clone());
  return out;
}

void check_against_full(bool sp, bool reduce_replicated, bool regather = false) {
  auto full = f64_block();
  auto split = std::make_shared<tpar::ParallelBlock>(*full, group(), sp);
  split->set_regather_in_backward(regather);
  const Tensor x = random_tensor({kB, kT, kC}, 7), dy = random_tensor({kB, kT, kC}, 8);
  const Tensor y_full = full->forward(x);
  const Tensor dx_full = full->backward(dy);
  const Run run = run_split(*split, x, dy);
  if (reduce_replicated) tpar::all_reduce_replicated_grads(*split, split->replicated_parameter_names(), group());
  const Tensor y_ref = sp ? tpar::scatter_sequence(y_full, group()) : y_full;
  const Tensor dx_ref = sp ? tpar::scatter_sequence(dx_full, group()) : dx_full;
  CHECK(all_ranks(max_rel_diff(run.y, y_ref) < kTol));
  CHECK(all_ranks(max_rel_diff(run.dx, dx_ref) < kTol));
  for (const auto& [name, p] : split->named_parameters()) {
    INFO("parameter " << name);
    const Tensor want = my_part(*split, name, full->parameter(name).grad);
    CHECK(p->grad.shape() == want.shape());
    CHECK(all_ranks(max_rel_diff(p->grad, want) < kTol));
  }
}

}  // namespace

TEST_CASE("tp block: outputs and every gradient equal nn::Block's (f64)", "[tp_block]") {
  check_against_full(/*sp=*/false, /*reduce_replicated=*/false);
}

TEST_CASE("tp block with sequence parallelism: equal after the replicated gradients' sum",
          "[tp_block]") {
  check_against_full(/*sp=*/true, /*reduce_replicated=*/true);
}

TEST_CASE("tp block with SP: the forgotten replicated-gradient all-reduce is caught", "[tp_block]") {
  if (group().size() == 1) return;
  auto full = f64_block();
  tpar::ParallelBlock split(*full, group(), /*sequence_parallel=*/true);
  const Tensor x = random_tensor({kB, kT, kC}, 7), dy = random_tensor({kB, kT, kC}, 8);
  full->forward(x);
  full->backward(dy);
  run_split(split, x, dy);  // and no all_reduce_replicated_grads
  const auto names = split.replicated_parameter_names();
  REQUIRE(names.size() == 6);  // ln_1, ln_2 (weight, bias), attn.c_proj.bias, mlp.c_proj.bias
  for (const auto& n : names) {
    INFO(n);
    CHECK(all_ranks(max_rel_diff(split.parameter(n).grad, full->parameter(n).grad) > 1e-3));
  }
}

TEST_CASE("tp block: one collective per sub-block each way, B·T·C values each (none without "
          "SP over one rank)", "[tp_block]") {
  for (bool sp : {false, true}) {
    auto full = f64_block();
    tpar::ParallelBlock split(*full, group(), sp);
    const Tensor x = random_tensor({kB, kT, kC}, 7), dy = random_tensor({kB, kT, kC}, 8);
    const std::int64_t before = group().collectives_issued();
    if (before < 0) return;  // the backend does not count
    const Tensor xin = sp ? tpar::scatter_sequence(x, group()) : x;
    const Tensor dyin = sp ? tpar::scatter_sequence(dy, group()) : dy;
    const std::int64_t a = group().collectives_issued();
    split.forward(xin);
    const std::int64_t b = group().collectives_issued();
    split.backward(dyin);
    const std::int64_t c = group().collectives_issued();
    INFO("sequence parallel " << sp);
    // TP: an all-reduce per sub-block (none over a group of one: nothing to sum); SP: an
    // all-gather and a reduce-scatter per sub-block.
    const std::int64_t per_pass = sp ? 4 : group().size() > 1 ? 2 : 0;
    CHECK(b - a == per_pass);
    CHECK(c - b == per_pass);
  }
}

TEST_CASE("tp block with SP and the re-gather in the backward: equal to nn::Block, 4 + 6 "
          "collectives, only this rank's tokens of the column inputs kept", "[tp_block]") {
  check_against_full(/*sp=*/true, /*reduce_replicated=*/true, /*regather=*/true);
  const int P = group().size();
  std::size_t kept[2] = {0, 0};
  for (bool regather : {false, true}) {
    auto full = f64_block();
    tpar::ParallelBlock split(*full, group(), /*sequence_parallel=*/true);
    split.set_regather_in_backward(regather);
    CHECK(split.regather_in_backward() == regather);
    const Tensor x = tpar::scatter_sequence(random_tensor({kB, kT, kC}, 7), group());
    const Tensor dy = tpar::scatter_sequence(random_tensor({kB, kT, kC}, 8), group());
    const std::int64_t a = group().collectives_issued();
    const std::size_t before = memory_stats(Device::cpu()).allocated;
    const Tensor y = split.forward(x);
    kept[regather] = memory_stats(Device::cpu()).allocated - before - y.nbytes();
    const std::int64_t b = group().collectives_issued();
    split.backward(dy);
    const std::int64_t c = group().collectives_issued();
    INFO("re-gather " << regather);
    if (a >= 0) {  // the backend counts: 2 more all-gathers in the backward
      CHECK(b - a == 4);
      CHECK(c - b == (regather ? 6 : 4));
    }
  }
  // The gathered inputs of c_attn and c_fc (2·N·C values) shrink to this rank's 2·N·C/P.
  const std::size_t N = kB * kT, saved = 2 * N * kC * sizeof(double) / static_cast<std::size_t>(P);
  INFO("kept without " << kept[0] << " B, with " << kept[1] << " B");
  CHECK(kept[0] - kept[1] == 2 * N * kC * sizeof(double) - saved);
  auto full = f64_block();
  CHECK_THROWS_WITH(tpar::ParallelBlock(*full, group()).set_regather_in_backward(true),
                    Catch::Contains("needs sequence parallelism"));
}

TEST_CASE("tp block: a head count the group does not divide is one clear error", "[tp_block]") {
  if (group().size() == 1) return;
  nn::manual_seed(5);
  nn::Block odd(10, 5);  // 5 heads: 2, 3 and 4 ranks do not divide them
  if (5 % group().size() == 0) return;
  CHECK_THROWS_WITH(tpar::ParallelBlock(odd, group()), Catch::Contains("heads do not split"));
}

TEST_CASE("vocabulary-parallel cross-entropy equals the full one, padding left out", "[tp_vocab]") {
  const int P = group().size(), r = group().rank();
  const std::int64_t N = 7, V = 10, Vp = tpar::padded_vocab(V, P);
  CHECK(Vp % P == 0);
  CHECK(Vp >= V);
  CHECK(Vp - V < P);
  const Tensor logits = random_tensor({N, V}, 21);
  const Tensor labels = random_labels(N, V, 22);
  Tensor probs;
  const double want = softmax_cross_entropy(logits, labels, &probs).to_vector<double>()[0];
  const Tensor dwant = softmax_cross_entropy_backward(probs, labels);
  // The padded logits [N, Vp]: the padding columns hold garbage the loss must ignore.
  Tensor padded = Tensor::full({N, Vp}, 50.0, DType::f64);
  for (std::int64_t n = 0; n < N; ++n) {
    Tensor dst = padded.view(n * Vp, {V});
    copy_(dst, logits.view(n * V, {V}));
  }
  const tpar::ShardRange mine = tpar::shard_range(Vp, P, r);
  Tensor grad;
  const double got = tpar::vocab_parallel_cross_entropy(tpar::take_columns(padded, mine), labels,
                                                        mine, V, group(), &grad);
  CHECK(all_ranks(std::abs(got - want) <= kTol * std::abs(want)));
  // This rank's columns of the full gradient (zeros in the padding).
  Tensor dpad = Tensor::zeros({N, Vp}, DType::f64);
  for (std::int64_t n = 0; n < N; ++n) {
    Tensor dst = dpad.view(n * Vp, {V});
    copy_(dst, dwant.view(n * V, {V}));
  }
  CHECK(all_ranks(max_rel_diff(grad, tpar::take_columns(dpad, mine)) < kTol));
}

TEST_CASE("vocabulary-parallel embedding equals nn::Embedding: one all-reduce forward, none "
          "backward, each rank the gradient of its rows", "[tp_vocab]") {
  const int P = group().size(), r = group().rank();
  const std::int64_t V = 10, C = 6;
  nn::manual_seed(9);
  nn::Embedding full(V, C);
  full.to(DType::f64);
  tpar::VocabParallelEmbedding split(full, group());
  const tpar::ShardRange rows = split.rows();
  CHECK(rows == tpar::shard_range(tpar::padded_vocab(V, P), P, r));
  std::vector<std::int64_t> tokens{0, 9, 3, 3, 7, 1, 9, 5};
  const Tensor ids = Tensor::from_vector(tokens, {2, 4});
  const Tensor dy = random_tensor({2, 4, C}, 33);
  const Tensor want = full.forward(ids);
  full.backward(dy);
  const std::int64_t before = group().collectives_issued();
  const Tensor got = split.forward(ids);
  const std::int64_t mid = group().collectives_issued();
  split.backward(dy);
  if (before >= 0) {
    CHECK(mid - before == 1);
    CHECK(group().collectives_issued() - mid == 0);
  }
  CHECK(all_ranks(max_rel_diff(got, want) == 0.0));
  // This rank's rows of the full gradient, zeros in the padding.
  Tensor mine = Tensor::zeros({rows.size(), C}, DType::f64);
  const std::int64_t real_end = std::min(rows.end, V);
  if (real_end > rows.begin) {
    Tensor dst = mine.slice(0, real_end - rows.begin);
    copy_(dst, full.parameter("weight").grad.slice(rows.begin, real_end));
  }
  CHECK(all_ranks(max_rel_diff(split.parameter("weight").grad, mine) < kTol));
}
