// Lesson 13, tasks 1-4 under mpirun (2, 3 and 4 ranks). Every rank builds the same f64 GPT
// block from a seed; the reference is nn::Block, unsplit, in one process. The runtime
// counts each group's collectives, so the tests check the exact number a block issues.
#include "tp_sp_test_util.h"

#include <cmath>
#include <vector>

#include "mgpu/allocator.h"

using namespace tp_sp_test;

namespace {

// Output, input gradient and every gradient of the split block against nn::Block's; the
// replicated parameters' gradients only when `with_replicated` (under SP they are partial
// until task 4 sums them).
void check_block(bool sp, bool reduce_replicated, bool with_replicated) {
  dist::ProcessGroup& g = group();
  auto full = f64_block();
  tpar::ParallelBlock split(*full, g, sp);
  const Tensor x = random_tensor({kB, kT, kC}, 7), dy = random_tensor({kB, kT, kC}, 8);
  const Tensor y_full = full->forward(x);
  const Tensor dx_full = full->backward(dy);
  const SplitRun run = run_split(split, x, dy);
  if (reduce_replicated) tpar::all_reduce_replicated_grads(split, split.replicated_parameter_names(), g);
  const int P = g.size(), r = g.rank();
  CHECK(max_rel_diff(run.y, sp ? my_tokens(y_full, P, r) : y_full) < kTol);
  CHECK(max_rel_diff(run.dx, sp ? my_tokens(dx_full, P, r) : dx_full) < kTol);
  for (const auto& [name, p] : split.named_parameters()) {
    if (!with_replicated && replicated(name)) continue;
    INFO("parameter " << name);
    const Tensor want = my_part(split, name, full->parameter(name).grad);
    REQUIRE(p->grad.shape() == want.shape());
    CHECK(max_rel_diff(p->grad, want) < kTol);
  }
}

// The collectives (kind, bytes written) of one forward and one backward of the split block.
std::pair<CollectiveLog, CollectiveLog> block_collectives(bool sp) {
  RecordingGroup rec(group());
  auto full = f64_block();
  tpar::ParallelBlock split(*full, rec, sp);
  const int P = rec.size(), r = rec.rank();
  const Tensor x = random_tensor({kB, kT, kC}, 7), dy = random_tensor({kB, kT, kC}, 8);
  split.forward(sp ? my_tokens(x, P, r) : x.clone());
  CollectiveLog forward = rec.take();
  split.backward(sp ? my_tokens(dy, P, r) : dy.clone());
  return {forward, rec.take()};
}

// Bytes a training forward of the block leaves allocated on this rank (what its contexts
// keep for the backward), the output itself left out.
std::size_t kept_bytes(bool sp) {
  dist::ProcessGroup& g = group();
  auto full = f64_block();
  tpar::ParallelBlock split(*full, g, sp);
  const Tensor x = random_tensor({kB, kT, kC}, 7);
  const Tensor xin = sp ? my_tokens(x, g.size(), g.rank()) : x.clone();
  const std::size_t before = memory_stats(Device::cpu()).allocated;
  const Tensor y = split.forward(xin);
  const std::size_t after = memory_stats(Device::cpu()).allocated;
  split.clear_saved();
  return after - before - y.nbytes();
}

}  // namespace

// ---- task 1: attention split by heads ----------------------------------------------------------

TEST_CASE("task1: head_shard gives n_head/P whole heads in rank order; a head count P does "
          "not divide is one clear error", "[13_tp_sp][task1][points:2]") {
  const int P = group().size();
  for (int r = 0; r < P; ++r) {
    const tpar::ShardRange h = tpar::head_shard(kHeads, P, r);
    CHECK(h.begin == r * kHeads / P);
    CHECK(h.end == (r + 1) * kHeads / P);
  }
  if (P == 1) return;  // one rank holds every head
  CHECK_THROWS_WITH(tpar::head_shard(5, P, 0), Catch::Contains("heads do not split"));
  CHECK_THROWS_WITH(tpar::head_shard(7, P, P - 1), Catch::Contains("heads do not split"));
}

TEST_CASE("task1: qkv_head_rows takes this rank's q, k and v rows of the fused c_attn",
          "[13_tp_sp][task1][points:2]") {
  const std::int64_t C = 12, D = 3;  // 4 heads of 3
  std::vector<double> w(static_cast<std::size_t>(3 * C * 2));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(i);
  const Tensor full = Tensor::from_vector(w, {3 * C, 2});
  const tpar::ShardRange heads{1, 3};
  const Tensor got = tpar::qkv_head_rows(full, heads, D);
  REQUIRE(got.shape() == Shape({18, 2}));
  const std::vector<double> v = got.to_vector<double>();
  for (std::int64_t part = 0; part < 3; ++part)
    for (std::int64_t i = 0; i < 6; ++i)
      for (std::int64_t c = 0; c < 2; ++c) {
        INFO("part " << part << " row " << i);
        CHECK(v[static_cast<std::size_t>((part * 6 + i) * 2 + c)] ==
              w[static_cast<std::size_t>((part * C + 3 + i) * 2 + c)]);
      }
  const Tensor bias = Tensor::from_vector(std::vector<double>(w.begin(), w.begin() + 3 * C), {3 * C});
  CHECK(tpar::qkv_head_rows(bias, heads, D).to_vector<double>() ==
        std::vector<double>{3, 4, 5, 6, 7, 8, 15, 16, 17, 18, 19, 20, 27, 28, 29, 30, 31, 32});
}

TEST_CASE("task1: the tensor-parallel block: output, input gradient and every gradient equal "
          "nn::Block's (f64, 1e-12 relative); one all-reduce per sub-block each way",
          "[13_tp_sp][task1][points:4]") {
  check_block(/*sp=*/false, /*reduce_replicated=*/false, /*with_replicated=*/true);
  auto full = f64_block();
  tpar::ParallelBlock split(*full, group());
  const SplitRun run = run_split(split, random_tensor({kB, kT, kC}, 7), random_tensor({kB, kT, kC}, 8));
  CHECK(run.forward_collectives == 2);
  CHECK(run.backward_collectives == 2);
  // Kind and bytes: each all-reduce carries the whole [B, T, C] (f64), both ways.
  const std::size_t whole = kB * kT * kC * sizeof(double);
  const CollectiveLog expected{{"all_reduce", whole}, {"all_reduce", whole}};
  const auto [forward, backward] = block_collectives(/*sp=*/false);
  CHECK(forward == expected);
  CHECK(backward == expected);
  if (group().size() > 1)  // 5 heads: 2, 3 and 4 ranks do not divide them
    CHECK_THROWS_WITH(tpar::ParallelBlock(*f64_block(10, 5), group()),
                    Catch::Contains("heads do not split"));
}

// ---- task 2: the vocabulary-parallel cross-entropy ----------------------------------------------

TEST_CASE("task2: the vocabulary-parallel cross-entropy equals the full one, its gradient "
          "too; padding ignored; two collectives; the logits' memory per rank is the "
          "chapter's, never N x V", "[13_tp_sp][task2][points:8]") {
  dist::ProcessGroup& g = group();
  const int P = g.size(), r = g.rank();
  for (std::int64_t V : {10, 12}) {  // 10 pads to 12 over 3 and 4 ranks; 12 needs none
    const std::int64_t N = 9, Vp = tpar::padded_vocab(V, P);
    INFO("vocabulary " << V << " padded to " << Vp);
    CHECK(Vp % P == 0);
    CHECK((Vp >= V && Vp - V < P));
    Tensor logits = random_tensor({N, V}, 21);
    scale_(logits, 20.0);  // large logits: only a stable sum survives
    const Tensor labels = random_labels(N, V, 22);
    Tensor probs;
    const double want = softmax_cross_entropy(logits, labels, &probs).to_vector<double>()[0];
    const Tensor dwant = softmax_cross_entropy_backward(probs, labels);
    // The padded logits [N, Vp]: the padding holds values above every real logit.
    Tensor padded = Tensor::full({N, Vp}, 1000.0, DType::f64), dpad = Tensor::zeros({N, Vp}, DType::f64);
    for (std::int64_t n = 0; n < N; ++n) {
      Tensor a = padded.view(n * Vp, {V}), b = dpad.view(n * Vp, {V});
      copy_(a, logits.view(n * V, {V}));
      copy_(b, dwant.view(n * V, {V}));
    }
    const tpar::ShardRange mine = tpar::shard_range(Vp, P, r);
    Tensor grad;
    double got = 0;
    CHECK(collectives_during(g, [&] {
            got = tpar::vocab_parallel_cross_entropy(tpar::take_columns(padded, mine), labels, mine,
                                                     V, g, &grad);
          }) == 2);
    CHECK(std::isfinite(got));
    CHECK(std::abs(got - want) <= kTol * std::abs(want));
    REQUIRE(grad.defined());
    REQUIRE(grad.shape() == Shape({N, mine.size()}));
    CHECK(max_rel_diff(grad, tpar::take_columns(dpad, mine)) < kTol);
  }
  // The logits' memory per rank (chapter §2), at a vocabulary large enough that the O(N)
  // numbers are noise: this rank's logits and their gradient, 2·N·Vp/P values (the padding
  // included), stay; the loss's peak adds at most one more such slice. Gathering the logits
  // (N·Vp values) would break both at 3 and 4 ranks, and the collective count at any.
  const std::int64_t N = 16, V = 1001, Vp = tpar::padded_vocab(V, P);
  const tpar::ShardRange mine = tpar::shard_range(Vp, P, r);
  const Tensor labels = random_labels(N, V, 23);
  const double slice = static_cast<double>(N * (Vp / P)) * sizeof(double);
  const std::size_t base = memory_stats(Device::cpu()).allocated;
  reset_peak_memory(Device::cpu());
  Tensor logits_r = random_tensor({N, mine.size()}, 24), grad;
  tpar::vocab_parallel_cross_entropy(logits_r, labels, mine, V, g, &grad);
  const double held = static_cast<double>(memory_stats(Device::cpu()).allocated - base);
  const double peak = static_cast<double>(memory_stats(Device::cpu()).peak_allocated - base);
  INFO("logits and gradient held " << held << " B (formula 2·N·Vp/P·8 = " << 2 * slice
                                   << " B), peak " << peak << " B (at most " << 3 * slice << " B)");
  CHECK(std::abs(held - 2 * slice) <= 0.05 * 2 * slice);
  CHECK(peak <= 1.05 * 3 * slice);
}

// ---- task 3: sequence parallelism ----------------------------------------------------------------

TEST_CASE("task3: gather_sequence and reduce_scatter_sequence: one collective each, tokens in "
          "order", "[13_tp_sp][task3][points:3]") {
  dist::ProcessGroup& g = group();
  const int P = g.size(), r = g.rank();
  const Tensor x = random_tensor({kB, kT, kC}, 31);
  Tensor whole;
  CHECK(collectives_during(g, [&] { whole = tpar::gather_sequence(my_tokens(x, P, r), g); }) == 1);
  CHECK(max_rel_diff(whole, x) == 0.0);
  // Each rank's partial sum differs; the sum is known here without communication.
  Tensor sum = Tensor::zeros({kB, kT, kC}, DType::f64);
  for (int q = 0; q < P; ++q) add_(sum, random_tensor({kB, kT, kC}, 40u + static_cast<unsigned>(q)));
  Tensor mine;
  CHECK(collectives_during(g, [&] {
          mine = tpar::reduce_scatter_sequence(random_tensor({kB, kT, kC}, 40u + static_cast<unsigned>(r)), g);
        }) == 1);
  CHECK(max_rel_diff(mine, my_tokens(sum, P, r)) < kTol);
}

TEST_CASE("task3: the block under SP: this rank's tokens of the output and input gradient, "
          "the split weights' gradients, equal nn::Block's; an all-gather and a reduce-scatter "
          "per sub-block each way", "[13_tp_sp][task3][points:3]") {
  check_block(/*sp=*/true, /*reduce_replicated=*/false, /*with_replicated=*/false);
  auto full = f64_block();
  tpar::ParallelBlock split(*full, group(), /*sequence_parallel=*/true);
  const SplitRun run = run_split(split, random_tensor({kB, kT, kC}, 7), random_tensor({kB, kT, kC}, 8));
  CHECK(run.forward_collectives == 4);
  CHECK(run.backward_collectives == 4);
  // Kind and bytes: per sub-block an all-gather writing the whole [B, T, C] and a
  // reduce-scatter writing this rank's [B, T/P, C], forward and backward alike.
  const std::size_t whole = kB * kT * kC * sizeof(double), part = whole / static_cast<std::size_t>(group().size());
  const CollectiveLog expected{{"all_gather", whole}, {"reduce_scatter", part},
                               {"all_gather", whole}, {"reduce_scatter", part}};
  const auto [forward, backward] = block_collectives(/*sp=*/true);
  CHECK(forward == expected);
  CHECK(backward == expected);
}

TEST_CASE("task3: SP divides the LayerNorm regions' activations by P: kept bytes per rank "
          "equal the chapter's formula within 5%", "[13_tp_sp][task3][points:2]") {
  const int P = group().size();
  const double N = kB * kT, C = kC, H = kHeads, T = kT, B = kB, f64 = 8;
  // Chapter §3: TP keeps 3NC + 4N + (12NC + B·H·T²)/P values per block; TP+SP keeps
  // 2NC + (13NC + 4N + B·H·T²)/P (the gathered inputs of the two column products stay whole).
  const double tp = f64 * (3 * N * C + 4 * N + (12 * N * C + B * H * T * T) / P);
  const double sp = f64 * (2 * N * C + (13 * N * C + 4 * N + B * H * T * T) / P);
  const double got_tp = static_cast<double>(kept_bytes(false));
  const double got_sp = static_cast<double>(kept_bytes(true));
  INFO("kept: TP " << got_tp << " B (formula " << tp << "), TP+SP " << got_sp << " B (formula "
                   << sp << ")");
  CHECK(std::abs(got_tp - tp) <= 0.05 * tp);
  CHECK(std::abs(got_sp - sp) <= 0.05 * sp);
  if (P > 1) CHECK(got_sp < got_tp);
}

// ---- task 4: the replicated gradients ------------------------------------------------------------

TEST_CASE("task4: under SP the LayerNorms' and row biases' gradients equal nn::Block's after "
          "all_reduce_replicated_grads, in one collective; without it they do not",
          "[13_tp_sp][task4][points:4]") {
  dist::ProcessGroup& g = group();
  auto full = f64_block();
  tpar::ParallelBlock split(*full, g, /*sequence_parallel=*/true);
  const Tensor x = random_tensor({kB, kT, kC}, 7), dy = random_tensor({kB, kT, kC}, 8);
  full->forward(x);
  full->backward(dy);
  run_split(split, x, dy);
  const std::vector<std::string> names = split.replicated_parameter_names();
  REQUIRE(names.size() == 6);  // ln_1 and ln_2 (weight, bias), attn.c_proj.bias, mlp.c_proj.bias
  // The classic bug: each rank's partial gradient (its own tokens only) differs from the sum.
  if (g.size() > 1)
    for (const auto& n : names)
      CHECK(max_rel_diff(split.parameter(n).grad, full->parameter(n).grad) > 1e-3);
  CHECK(collectives_during(g, [&] { tpar::all_reduce_replicated_grads(split, names, g); }) ==
        (g.size() > 1 ? 1 : 0));
  for (const auto& n : names) {
    INFO("parameter " << n);
    CHECK(max_rel_diff(split.parameter(n).grad, full->parameter(n).grad) < kTol);
  }
}

TEST_CASE("task4: two SGD steps under SP keep every rank's replicas equal to the unsplit "
          "block's", "[13_tp_sp][task4][points:2]") {
  dist::ProcessGroup& g = group();
  auto full = f64_block();
  tpar::ParallelBlock split(*full, g, /*sequence_parallel=*/true);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    full->zero_grad();
    split.zero_grad();
    const Tensor x = random_tensor({kB, kT, kC}, 50u + static_cast<unsigned>(step));
    const Tensor dy = random_tensor({kB, kT, kC}, 60u + static_cast<unsigned>(step));
    const Tensor y_full = full->forward(x);
    full->backward(dy);
    const SplitRun run = run_split(split, x, dy);
    CHECK(max_rel_diff(run.y, my_tokens(y_full, g.size(), g.rank())) < 1e-11);
    tpar::all_reduce_replicated_grads(split, split.replicated_parameter_names(), g);
    for (auto* m : {static_cast<nn::Module*>(full.get()), static_cast<nn::Module*>(&split)})
      for (nn::Parameter* p : m->parameters()) axpy_(p->value, -0.01, p->grad);  // SGD, lr 0.01
  }
  for (const auto& n : split.replicated_parameter_names())
    CHECK(max_rel_diff(split.parameter(n).value, full->parameter(n).value) < 1e-11);
}
