// Lesson 14, task 5 under mpirun (2, 3 and 4 ranks): DeepSpeed-Ulysses. Every rank builds
// the same f64 q, k, v of B = 2 sequences of H = 12 heads from a seed and keeps its own
// positions of every head; the reference is full attention in one process. A group that
// passes every op on counts the all-to-alls and the bytes each writes.
#include "cp_test_util.h"

using namespace cp_test;

namespace {

const cp::Split kUlyssesSplits[] = {cp::Split::plain, cp::Split::zigzag};

// The whole sequence's result, and this rank's positions of it (every head).
RankCase ulysses_case(bool causal, cp::Split split, int P, int r) {
  return rank_case_of(ulysses_whole_inputs(), causal, split, P, r);
}

// `t` has shape `shape` (checked first: an unfinished function returns nothing to compare).
void require_shape(const Tensor& t, const Shape& shape) {
  REQUIRE(t.defined());
  REQUIRE(t.shape() == shape);
}

}  // namespace

TEST_CASE("task5: sequence_to_heads gives rank r heads r·H/P.. of the whole sequence in one "
          "all-to-all, and heads_to_sequence undoes it exactly, plain or zigzag",
          "[14_context_parallel][task5][points:3]") {
  for (cp::Split split : kUlyssesSplits) {
    INFO(cp::split_name(split));
    SendLog log(group());
    const int P = log.size(), r = log.rank();
    const RankCase c = ulysses_case(false, split, P, r);
    const Tensor h = cp::sequence_to_heads(c.q, kUH, log);
    require_shape(h, {kUB * kUH / P, kT, kD});
    CHECK(max_abs_diff(h, expected_head_rows(c.whole_q, kUB, kUH, P, r, split)) == 0.0);
    check_all_to_alls(log, 1, c.q.nbytes());
    const Tensor back = cp::heads_to_sequence(h, kUH, log);
    require_shape(back, c.q.shape());
    CHECK(max_abs_diff(back, c.q) == 0.0);
    check_all_to_alls(log, 2, c.q.nbytes());
    CHECK(all_ranks(true));
  }
}

TEST_CASE("task5: Ulysses' output equals full attention's rows at 1e-12, causal or not, plain "
          "or zigzag, in exactly 4 all-to-alls of one rank's Q bytes each",
          "[14_context_parallel][task5][points:3]") {
  for (bool causal : {false, true})
    for (cp::Split split : kUlyssesSplits) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      SendLog log(group());
      const int P = log.size(), r = log.rank();
      const RankCase c = ulysses_case(causal, split, P, r);
      const cp::UlyssesForward f = cp::ulysses_attention_forward(c.q, c.k, c.v, kUH, split, causal, log);
      require_shape(f.out, c.q.shape());
      CHECK(max_rel_diff(f.out, take_rows(c.full.y, c.pos)) < kTol);
      // Q, K, V in (3), the output back (1); each writes B·H·(T/P)·D values, (P-1)/P of
      // which came from other ranks.
      check_all_to_alls(log, 4, c.q.nbytes());
      // The kept operands are the head-sharded Q, K, V; attention ran once over the whole
      // sequence (one block of T x T score entries).
      require_shape(f.k, {kUB * kUH / P, kT, kD});
      CHECK(max_abs_diff(f.q, expected_head_rows(c.whole_q, kUB, kUH, P, r, split)) == 0.0);
      CHECK(f.work == kT * kT);
      CHECK(all_ranks(true));
    }
}

TEST_CASE("task5: Ulysses' dq, dk, dv equal full attention's rows at 1e-12, causal or not, "
          "plain or zigzag, in exactly 4 all-to-alls (dO in, dQ, dK, dV back)",
          "[14_context_parallel][task5][points:3]") {
  dist::ProcessGroup& g = group();
  for (bool causal : {false, true})
    for (cp::Split split : kUlyssesSplits) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      const RankCase c = ulysses_case(causal, split, g.size(), g.rank());
      const cp::UlyssesForward f = cp::ulysses_attention_forward(c.q, c.k, c.v, kUH, split, causal, g);
      SendLog log(g);
      const nn::AttentionGrads grads = cp::ulysses_attention_backward(c.dy, f, kUH, split, causal, log);
      require_shape(grads.dq, c.q.shape());
      require_shape(grads.dk, c.k.shape());
      require_shape(grads.dv, c.v.shape());
      CHECK(max_rel_diff(grads.dq, take_rows(c.full.grads.dq, c.pos)) < kTol);
      CHECK(max_rel_diff(grads.dk, take_rows(c.full.grads.dk, c.pos)) < kTol);
      CHECK(max_rel_diff(grads.dv, take_rows(c.full.grads.dv, c.pos)) < kTol);
      check_all_to_alls(log, 4, c.q.nbytes());
      CHECK(all_ranks(true));
    }
}

TEST_CASE("task5: H that P does not divide is refused with one error naming H and P, before "
          "any traffic; an H that it divides is accepted", "[14_context_parallel][task5][points:1]") {
  SendLog log(group());
  const int P = log.size();
  const std::int64_t H = P + 1;  // never a multiple of P for P >= 2
  const std::string refusal = "Ulysses: H = " + std::to_string(H) +
                              " heads do not split over P = " + std::to_string(P) + " ranks";
  const Tensor x = random_tensor({2 * H, kT / P, kD}, 31);
  CHECK_THROWS_WITH(cp::heads_per_rank(H, P), Catch::Contains(refusal) && Catch::Contains("ring attention"));
  CHECK_THROWS_WITH(cp::sequence_to_heads(x, H, log), Catch::Contains(refusal));
  CHECK_THROWS_WITH(cp::heads_to_sequence(random_tensor({2, kT, kD}, 32), H, log),
                    Catch::Contains(refusal));
  CHECK_THROWS_WITH(cp::ulysses_attention_forward(x, x, x, H, cp::Split::plain, true, log),
                    Catch::Contains(refusal));
  CHECK(log.collectives == 0);
  CHECK(log.sent.empty());
  // H = 2P: two heads a rank.
  CHECK(cp::heads_per_rank(2 * P, P) == 2);
  const Tensor ok = cp::sequence_to_heads(random_tensor({2 * P, kT / P, kD}, 33), 2 * P, log);
  require_shape(ok, {2, kT, kD});
  CHECK(log.collectives == 1);
  CHECK(all_ranks(true));
}
