// The ring x Ulysses hybrid of context parallelism (mgpu/parallel/cp/hybrid_attention.h), a
// library test beside lesson 14's graded ones, under mpirun at 1 to 4 ranks: the CP group is
// the world (P ranks), cut as U x R for every U dividing P (at 4 ranks: U = 2, R = 2, and
// the degenerate U = 4, a ring of one, and U = 1, an all-to-all of one). The reference is
// full attention in one process (lesson 14's test helpers); groups that pass every op on
// count the all-to-alls and the ring's sends.
#include <memory>

#include "../../14_context_parallel/cp_test_util.h"
#include "mgpu/parallel/cp/hybrid_attention.h"

// Inside cp_test (not `using namespace`): in a unity build this file shares a translation
// unit with test_tp_block_mpi.cpp, whose own kT, kTol, ... would make those names ambiguous.
namespace cp_test {

namespace {

// This rank's rows of the whole sequence's inputs and of full attention's result.
RankCase hybrid_case(bool causal, cp::Split split, int P, int r) {
  return rank_case_of(ulysses_whole_inputs(), causal, split, P, r);
}

// The hybrid's groups with a log around each.
struct LoggedGroups {
  cp::HybridGroups real, logged;
  std::shared_ptr<SendLog> ulysses, ring;
};

LoggedGroups logged_groups(int U) {
  const int P = group().size();
  std::vector<int> world;
  for (int i = 0; i < P; ++i) world.push_back(i);
  LoggedGroups g;
  g.real = cp::new_hybrid_groups({world}, U, "mpi", Device::cpu(), quiet_options());
  g.ulysses = std::make_shared<SendLog>(*g.real.ulysses);
  g.ring = std::make_shared<SendLog>(*g.real.ring);
  g.logged = {g.ulysses, g.ring, g.real.U, g.real.R};
  return g;
}

std::vector<int> divisors(int P) {
  std::vector<int> out;
  for (int U = 1; U <= P; ++U)
    if (P % U == 0) out.push_back(U);
  return out;
}

}  // namespace

TEST_CASE("cp hybrid: the groups are U consecutive CP ranks (Ulysses) and the ranks at one "
          "place in every Ulysses group (ring)", "[cp][hybrid]") {
  const int P = group().size(), r = group().rank();
  for (int U : divisors(P)) {
    INFO("U " << U);
    const cp::HybridGroups g = cp::new_hybrid_groups({[&] {
      std::vector<int> w;
      for (int i = 0; i < P; ++i) w.push_back(i);
      return w;
    }()}, U, "mpi", Device::cpu(), quiet_options());
    REQUIRE(g.ulysses);
    REQUIRE(g.ring);
    CHECK(g.U == U);
    CHECK(g.R == P / U);
    CHECK(g.ulysses->size() == U);
    CHECK(g.ring->size() == P / U);
    CHECK(g.ulysses->rank() == r % U);
    CHECK(g.ring->rank() == r / U);
  }
  CHECK(cp::default_ulysses_size(4, 12) == 2);
  CHECK(cp::default_ulysses_size(8, 12) == 4);
  CHECK(cp::default_ulysses_size(3, 12) == 1);
  CHECK(cp::default_ulysses_size(1, 12) == 1);
  CHECK_THROWS_WITH(cp::new_hybrid_groups({{0, 1, 2}}, 2), Catch::Contains("does not divide"));
  CHECK(all_ranks(true));
}

TEST_CASE("cp hybrid: forward and backward equal full attention's rows at 1e-12, causal or "
          "not, plain or zigzag, in 4 + 4 all-to-alls and 2(R-1) + 4(R-1) ring sends",
          "[cp][hybrid]") {
  const int P = group().size(), r = group().rank();
  for (int U : divisors(P))
    for (bool causal : {false, true})
      for (cp::Split split : {cp::Split::plain, cp::Split::zigzag}) {
        INFO("U " << U << ", causal " << causal << ", " << cp::split_name(split));
        const int R = P / U;
        LoggedGroups g = logged_groups(U);
        const RankCase c = hybrid_case(causal, split, P, r);
        const cp::HybridForward f =
            cp::hybrid_attention_forward(c.q, c.k, c.v, kUH, split, causal, g.logged);
        REQUIRE(f.out.shape() == c.q.shape());
        CHECK(max_rel_diff(f.out, take_rows(c.full.y, c.pos)) < kTol);
        check_all_to_alls(*g.ulysses, 4, c.q.nbytes());
        CHECK(g.ring->collectives == 0);
        CHECK(g.ring->sent.size() == static_cast<std::size_t>(2 * (R - 1)));
        // Each ring message is one block of K or V: B·(H/U) heads of T/R positions.
        for (const Sent& s : g.ring->sent) CHECK(s.bytes == c.q.nbytes());
        CHECK(f.q.shape() == Shape{kUB * kUH / U, kT / R, kD});

        const nn::AttentionGrads grads =
            cp::hybrid_attention_backward(c.dy, f, kUH, split, causal, g.logged);
        REQUIRE(grads.dq.shape() == c.q.shape());
        CHECK(max_rel_diff(grads.dq, take_rows(c.full.grads.dq, c.pos)) < kTol);
        CHECK(max_rel_diff(grads.dk, take_rows(c.full.grads.dk, c.pos)) < kTol);
        CHECK(max_rel_diff(grads.dv, take_rows(c.full.grads.dv, c.pos)) < kTol);
        check_all_to_alls(*g.ulysses, 8, c.q.nbytes());
        CHECK(g.ring->collectives == 0);
        CHECK(g.ring->sent.size() == static_cast<std::size_t>(6 * (R - 1)));
        CHECK(all_ranks(true));
      }
}

TEST_CASE("cp hybrid: U = P is Ulysses and U = 1 is the ring (the same results at 1e-12)",
          "[cp][hybrid]") {
  dist::ProcessGroup& world = group();
  const int P = world.size(), r = world.rank();
  for (bool causal : {false, true})
    for (cp::Split split : {cp::Split::plain, cp::Split::zigzag}) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      const RankCase c = hybrid_case(causal, split, P, r);
      const LoggedGroups all = logged_groups(P), none = logged_groups(1);
      const cp::HybridForward h_u = cp::hybrid_attention_forward(c.q, c.k, c.v, kUH, split, causal, all.real);
      const cp::UlyssesForward u = cp::ulysses_attention_forward(c.q, c.k, c.v, kUH, split, causal, world);
      CHECK(max_rel_diff(h_u.out, u.out) < kTol);
      const cp::HybridForward h_r = cp::hybrid_attention_forward(c.q, c.k, c.v, kUH, split, causal, none.real);
      const cp::CpForward ring = cp::ring_attention_forward(c.q, c.k, c.v, split, causal, world);
      CHECK(max_rel_diff(h_r.out, ring.out) < kTol);
      CHECK(h_r.work == ring.work);
      CHECK(all_ranks(true));
    }
}

TEST_CASE("cp hybrid: H that U does not divide is refused with Ulysses' one error, before any "
          "traffic", "[cp][hybrid]") {
  const int P = group().size();
  if (P < 2) return;  // U = 1 divides every H
  LoggedGroups g = logged_groups(P);
  const std::int64_t H = P + 1;
  const Tensor x = random_tensor({2 * H, kT / P, kD}, 41);
  CHECK_THROWS_WITH(cp::hybrid_attention_forward(x, x, x, H, cp::Split::plain, true, g.logged),
                    Catch::Contains("Ulysses: H = " + std::to_string(H) +
                                    " heads do not split over P = " + std::to_string(P)));
  CHECK(g.ulysses->collectives == 0);
  CHECK(g.ring->sent.empty());
  CHECK(all_ranks(true));
}

}  // namespace cp_test
