// Lesson 14, tasks 1-4 under mpirun (2, 3 and 4 ranks). Every rank builds the same f64
// q, k, v of a whole sequence from a seed and keeps its own rows; the reference is full
// attention in one process (lesson 12's for the causal case).
#include "cp_test_util.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

using namespace cp_test;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The whole sequence's result, and this rank's part of it.
RankCase rank_case(bool causal, cp::Split split, int P, int r) {
  return rank_case_of(whole_inputs(), causal, split, P, r);
}

// A rank's output and gradients against full attention's rows.
void check_against_full(const RankCase& c, const Tensor& y, const nn::AttentionGrads* g) {
  CHECK(max_rel_diff(y, take_rows(c.full.y, c.pos)) < kTol);
  if (!g) return;
  CHECK(max_rel_diff(g->dq, take_rows(c.full.grads.dq, c.pos)) < kTol);
  CHECK(max_rel_diff(g->dk, take_rows(c.full.grads.dk, c.pos)) < kTol);
  CHECK(max_rel_diff(g->dv, take_rows(c.full.grads.dv, c.pos)) < kTol);
}

const cp::Split kSplits[] = {cp::Split::plain, cp::Split::zigzag};

// Partial results of all queries over key sets `sets` (positions) of the whole sequence.
std::vector<cp::PartialAttention> partials(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const std::vector<std::vector<std::int64_t>>& sets,
                                           bool causal) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(kT));
  std::iota(all.begin(), all.end(), 0);
  std::vector<cp::PartialAttention> out;
  for (const auto& s : sets)
    out.push_back(cp::block_attention(q, take_rows(k, s), take_rows(v, s), all, s, causal));
  return out;
}

cp::PartialAttention copy_of(const cp::PartialAttention& p) { return {p.out.clone(), p.lse.clone()}; }

}  // namespace

// ---- task 1: the online softmax's merge --------------------------------------------------------

TEST_CASE("task1: merging partial results over disjoint key sets equals full attention, in "
          "any order and any grouping", "[14_context_parallel][task1][points:3]") {
  auto [q, k, v, dy] = whole_inputs();
  // Four key sets, not contiguous: every third position, and the rest in two halves.
  std::vector<std::vector<std::int64_t>> sets(4);
  for (std::int64_t t = 0; t < kT; ++t) sets[t % 3 == 0 ? 0 : t < kT / 3 ? 1 : t < 2 * kT / 3 ? 2 : 3].push_back(t);
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const Tensor want = full_attention(q, k, v, dy, causal).y;
    const auto parts = partials(q, k, v, sets, causal);
    std::vector<int> order = {0, 1, 2, 3};
    int orders = 0;
    do {  // every order, folded one by one
      cp::PartialAttention acc = cp::empty_partial(kBH, kT, kD);
      for (int i : order) cp::merge_partial(acc, parts[i]);
      CHECK(max_rel_diff(acc.out, want) < kTol);
      ++orders;
    } while (std::next_permutation(order.begin(), order.end()));
    CHECK(orders == 24);
    // A tree: (3 + 1) + (0 + 2).
    cp::PartialAttention a = copy_of(parts[3]), b = copy_of(parts[0]);
    cp::merge_partial(a, parts[1]);
    cp::merge_partial(b, parts[2]);
    cp::merge_partial(a, b);
    CHECK(max_rel_diff(a.out, want) < kTol);
    // The lse of the union is the log of the whole denominator: lse(all keys) directly.
    std::vector<std::int64_t> all(static_cast<std::size_t>(kT));
    std::iota(all.begin(), all.end(), 0);
    const cp::PartialAttention whole = cp::block_attention(q, k, v, all, all, causal);
    CHECK(max_abs_diff(a.lse, whole.lse) < 1e-12);
  }
}

TEST_CASE("task1: a side that saw no key changes nothing, two such sides stay -inf with out 0, "
          "and scores of 1e4 stay finite", "[14_context_parallel][task1][points:2]") {
  auto [q, k, v, dy] = whole_inputs();
  (void)dy;
  std::vector<std::int64_t> all(static_cast<std::size_t>(kT));
  std::iota(all.begin(), all.end(), 0);
  const cp::PartialAttention whole = cp::block_attention(q, k, v, all, all, true);
  cp::PartialAttention acc = copy_of(whole);
  cp::merge_partial(acc, cp::empty_partial(kBH, kT, kD));
  CHECK(max_abs_diff(acc.out, whole.out) == 0.0);
  CHECK(max_abs_diff(acc.lse, whole.lse) == 0.0);
  cp::PartialAttention e = cp::empty_partial(kBH, kT, kD);
  cp::merge_partial(e, whole);
  CHECK(max_rel_diff(e.out, whole.out) < kTol);
  cp::PartialAttention none = cp::empty_partial(kBH, kT, kD);
  cp::merge_partial(none, cp::empty_partial(kBH, kT, kD));
  for (double x : none.lse.to_vector<double>()) CHECK(x == kNegInf);
  for (double x : none.out.to_vector<double>()) CHECK(x == 0.0);
  // Scores of about 1e4: exp would overflow without the running maximum.
  Tensor big = scale(q, 3e3);
  const Tensor want = full_attention(big, k, v, v, false).y;
  std::vector<std::int64_t> lo(all.begin(), all.begin() + kT / 2), hi(all.begin() + kT / 2, all.end());
  const auto parts = partials(big, k, v, {hi, lo}, false);
  cp::PartialAttention m = copy_of(parts[0]);
  cp::merge_partial(m, parts[1]);
  for (double x : m.out.to_vector<double>()) REQUIRE(std::isfinite(x));
  CHECK(max_rel_diff(m.out, want) < kTol);
  CHECK_THROWS(cp::merge_partial(m, cp::empty_partial(kBH, kT - 1, kD)));
}

// ---- task 2: the positions of a rank -----------------------------------------------------------

TEST_CASE("task2: plain and zigzag splits are permutations of the sequence, T/P positions per "
          "rank, ascending", "[14_context_parallel][task2][points:2]") {
  for (int P : {1, 2, 3, 4, 6, 8})
    for (cp::Split split : kSplits) {
      INFO("P " << P << ", " << cp::split_name(split));
      const std::int64_t T = 48;
      std::vector<int> seen(T, 0);
      for (int r = 0; r < P; ++r) {
        const auto pos = cp::sequence_positions(T, P, r, split);
        CHECK(pos == expected_positions(T, P, r, split));
        CHECK(std::is_sorted(pos.begin(), pos.end()));
        for (auto t : pos) ++seen[t];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
}

TEST_CASE("task2: under the causal mask zigzag gives every rank the same work, (2P+1) chunk "
          "pairs; plain gives rank r r+1 blocks", "[14_context_parallel][task2][points:2]") {
  for (int P : {1, 2, 3, 4, 6})
    for (cp::Split split : kSplits) {
      INFO("P " << P << ", " << cp::split_name(split));
      const std::int64_t T = 24 * 2, chunk = cp::chunk_rows(T, P, split);
      const Tensor x = random_tensor({1, T / P, 2}, 3);
      std::vector<std::int64_t> work(P, 0);
      for (int r = 0; r < P; ++r)
        for (int j = 0; j < P; ++j)
          cp::block_attention(x, x, x, cp::sequence_positions(T, P, r, split),
                              cp::sequence_positions(T, P, j, split), true, chunk, &work[r]);
      for (int r = 0; r < P; ++r) CHECK(work[r] == cp::causal_work(T, P, r, split));
      if (split == cp::Split::zigzag)
        CHECK(*std::max_element(work.begin(), work.end()) == *std::min_element(work.begin(), work.end()));
    }
}

TEST_CASE("task2: a T that does not split evenly is refused with one clear error",
          "[14_context_parallel][task2][points:1]") {
  CHECK_THROWS_WITH(cp::sequence_positions(10, 3, 0, cp::Split::plain),
                    Catch::Contains("T = 10 does not split into 3 equal chunks over 3 ranks"));
  CHECK_THROWS_WITH(cp::sequence_positions(12, 4, 1, cp::Split::zigzag),
                    Catch::Contains("T = 12 does not split into 8 equal chunks over 4 ranks"));
  // Through the ring: 3 rows per rank cannot be two chunks.
  const int P = group().size();
  const Tensor x = random_tensor({1, 3, 2}, 4);
  CHECK_THROWS_WITH(cp::ring_attention_forward(x, x, x, cp::Split::zigzag, true, group()),
                    Catch::Contains("does not split into " + std::to_string(2 * P) + " equal chunks"));
}

// ---- task 3: the ring's forward ----------------------------------------------------------------

TEST_CASE("task3: ring attention's output equals full attention's rows at 1e-12, causal or "
          "not, plain or zigzag, by the ring (no collective)", "[14_context_parallel][task3][points:4]") {
  for (bool causal : {false, true})
    for (cp::Split split : kSplits) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      SendLog g(group());
      const RankCase c = rank_case(causal, split, g.size(), g.rank());
      const cp::CpForward f = cp::ring_attention_forward(c.q, c.k, c.v, split, causal, g);
      check_against_full(c, f.out, nullptr);
      // The all-gather baseline gives the same output with collectives: not the ring.
      CHECK(g.collectives == 0);
      CHECK(all_ranks(true));
    }
}

TEST_CASE("task3: the forward sends K and V to rank r+1, P-1 times each (2(P-1) sends), and "
          "computes only the blocks the mask lets through", "[14_context_parallel][task3][points:2]") {
  for (bool causal : {false, true})
    for (cp::Split split : kSplits) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      SendLog log(group());
      const int P = log.size(), r = log.rank();
      const RankCase c = rank_case(causal, split, P, r);
      const cp::CpForward f = cp::ring_attention_forward(c.q, c.k, c.v, split, causal, log);
      CHECK(log.sent.size() == static_cast<std::size_t>(2 * (P - 1)));
      CHECK(with_tag(log.sent, cp::kTagK).size() == static_cast<std::size_t>(P - 1));
      CHECK(with_tag(log.sent, cp::kTagV).size() == static_cast<std::size_t>(P - 1));
      for (const Sent& s : log.sent) {
        CHECK(s.peer == (r + 1) % P);
        CHECK(s.bytes == c.k.nbytes());
      }
      CHECK(log.collectives == 0);
      const std::int64_t Tl = kT / P;
      CHECK(f.work == (causal ? cp::causal_work(kT, P, r, split) : kT * Tl));
    }
}

// ---- task 4: the ring's backward ---------------------------------------------------------------

TEST_CASE("task4: ring attention's dq, dk, dv equal full attention's rows at 1e-12, causal or "
          "not, plain or zigzag, by the ring (no collective; the all-gather baseline gives the "
          "same with collectives)", "[14_context_parallel][task4][points:4]") {
  dist::ProcessGroup& g = group();
  for (bool causal : {false, true})
    for (cp::Split split : kSplits) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      const RankCase c = rank_case(causal, split, g.size(), g.rank());
      const cp::CpForward f = cp::ring_attention_forward(c.q, c.k, c.v, split, causal, g);
      SendLog ring(g);
      const nn::AttentionGrads grads =
          cp::ring_attention_backward(c.dy, c.q, c.k, c.v, f, split, causal, ring);
      check_against_full(c, f.out, &grads);
      CHECK(ring.collectives == 0);
      // The library's all-gather baseline (2 all-gathers, then 2 more and 2 reduce-scatters)
      // gives the same.
      SendLog log(g);
      const cp::CpForward fa = cp::allgather_attention_forward(c.q, c.k, c.v, split, causal, log);
      const nn::AttentionGrads ga =
          cp::allgather_attention_backward(c.dy, c.q, c.k, c.v, fa, split, causal, log);
      CHECK(log.collectives == 6);
      CHECK(log.sent.empty());
      check_against_full(c, fa.out, &ga);
      CHECK(all_ranks(true));
    }
}

TEST_CASE("task4: the backward sends K and V round once more and dK, dV home: 2(P-1) sends "
          "each, all to rank r+1, each in a batch with receives, no collective",
          "[14_context_parallel][task4][points:2]") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const cp::Split split = cp::Split::zigzag;
    SendLog log(group());
    const int P = log.size(), r = log.rank();
    const RankCase c = rank_case(causal, split, P, r);
    const cp::CpForward f = cp::ring_attention_forward(c.q, c.k, c.v, split, causal, log);
    log.sent.clear();
    log.batches.clear();
    cp::ring_attention_backward(c.dy, c.q, c.k, c.v, f, split, causal, log);
    // NCCL starts a batch's sends only with the peer's matching receives: a batch of sends
    // alone (dK, dV posted on their own) waits behind the peer's next batch, and around the
    // ring that is a wait with no end once the tensors are large.
    for (std::size_t b = 0; b < log.batches.size(); ++b) {
      INFO("batch " << b << " of the backward: " << log.batches[b].sends << " send(s), "
           << log.batches[b].receives << " receive(s)");
      CHECK((log.batches[b].sends == 0 || log.batches[b].receives > 0));
    }
    const std::size_t n = static_cast<std::size_t>(P - 1);
    CHECK(log.sent.size() == 4 * n);
    CHECK(with_tag(log.sent, cp::kTagK).size() == n);
    CHECK(with_tag(log.sent, cp::kTagV).size() == n);
    CHECK(with_tag(log.sent, cp::kTagDK).size() == n);
    CHECK(with_tag(log.sent, cp::kTagDV).size() == n);
    for (const Sent& s : log.sent) CHECK(s.peer == (r + 1) % P);
    for (const Sent& s : with_tag(log.sent, cp::kTagDK)) CHECK(s.bytes == c.k.numel() * sizeof(double));
    CHECK(log.collectives == 0);
  }
}
