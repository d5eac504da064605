// Lesson 03, task 2: the GPipe schedule on its own clock, and its bubble.
#include "model_parallel_test_util.h"

using namespace lesson03_test;
using l03::PipeOp;
using l03::Pass;

TEST_CASE("task2: GPipe, K = 4 and M = 4, tick by tick", "[03_model_parallel][task2][points:3]") {
  const l03::Schedule s = l03::gpipe_schedule(4, 4);
  const std::string want =
      "stage 0 F0 F1 F2 F3 .  .  .  .  .  .  B3 B2 B1 B0 \n"
      "stage 1 .  F0 F1 F2 F3 .  .  .  .  B3 B2 B1 B0 .  \n"
      "stage 2 .  .  F0 F1 F2 F3 .  .  B3 B2 B1 B0 .  .  \n"
      "stage 3 .  .  .  F0 F1 F2 F3 B3 B2 B1 B0 .  .  .  \n";
  CHECK(s.num_stages == 4);
  CHECK(s.num_micro == 4);
  CHECK(s.draw() == want);
}

TEST_CASE("task2: GPipe is a valid, gap-free schedule for K = 1..4, M = 1..8", "[03_model_parallel][task2][points:3]") {
  for (int K = 1; K <= 4; ++K) {
    for (int M = 1; M <= 8; ++M) {
      INFO("K = " << K << ", M = " << M);
      const l03::Schedule s = l03::gpipe_schedule(K, M);
      CHECK(s.ticks.size() == static_cast<std::size_t>(2 * (M + K - 1)));
      CHECK_NOTHROW(l03::check_schedule(s));
      for (int k = 0; k < K; ++k) {
        // Each stage: every forward in order, then every backward in reverse (the flush).
        std::vector<PipeOp> want;
        for (int m = 0; m < M; ++m) want.push_back({Pass::forward, m});
        for (int m = M - 1; m >= 0; --m) want.push_back({Pass::backward, m});
        CHECK(s.stage_ops(k) == want);
        // Forwards back to back from tick k, backwards back to back to the end minus k.
        const auto& ticks = s.ticks;
        for (int m = 0; m < M; ++m) CHECK(ticks[m + k][k] == std::optional<PipeOp>(PipeOp{Pass::forward, m}));
        CHECK(ticks[ticks.size() - 1 - k][k] == std::optional<PipeOp>(PipeOp{Pass::backward, 0}));
      }
    }
  }
}

TEST_CASE("task2: the bubble of K = 4, M = 8 is 3/11 of the schedule", "[03_model_parallel][task2][points:3]") {
  const l03::Schedule s = l03::gpipe_schedule(4, 8);
  std::size_t idle = 0, slots = 0;
  for (const auto& row : s.ticks)
    for (const auto& cell : row) {
      ++slots;
      idle += !cell;
    }
  CHECK(slots == 88);  // 4 stages x 22 ticks
  CHECK(idle == 24);   // 24 / 88 = 3 / 11
  CHECK(s.idle_fraction() == Approx(3.0 / 11.0).epsilon(1e-12));
  for (int K = 1; K <= 4; ++K)
    for (int M = 1; M <= 8; ++M)
      CHECK(l03::gpipe_schedule(K, M).idle_fraction() ==
            Approx(static_cast<double>(K - 1) / (M + K - 1)).epsilon(1e-12));
}

TEST_CASE("task2: GPipe rejects K < 1 or M < 1", "[03_model_parallel][task2][points:1]") {
  CHECK(l03::gpipe_schedule(2, 2).ticks.size() == 6);
  CHECK(contains(error_of([] { l03::gpipe_schedule(0, 4); }), "K = 0"));
  CHECK(contains(error_of([] { l03::gpipe_schedule(2, 0); }), "M = 0"));
}

TEST_CASE("the naive schedule keeps one stage busy at a time", "[03_model_parallel]") {
  for (int K = 1; K <= 4; ++K) {
    const l03::Schedule s = l03::naive_schedule(K, 3);
    CHECK_NOTHROW(l03::check_schedule(s));
    for (const auto& row : s.ticks) {
      int busy = 0;
      for (const auto& cell : row) busy += cell.has_value();
      CHECK(busy == 1);
    }
    CHECK(s.idle_fraction() == Approx(static_cast<double>(K - 1) / K));
  }
}

TEST_CASE("1F1B: the same bubble as GPipe, K - k micro-batches in flight instead of M", "[03_model_parallel]") {
  for (int K = 1; K <= 4; ++K) {
    for (int M = 1; M <= 8; ++M) {
      INFO("K = " << K << ", M = " << M);
      const l03::Schedule s = l03::one_f_one_b_schedule(K, M);
      CHECK_NOTHROW(l03::check_schedule(s));
      CHECK(s.ticks.size() == static_cast<std::size_t>(2 * (M + K - 1)));
      const l03::Schedule g = l03::gpipe_schedule(K, M);
      for (int k = 0; k < K; ++k) {
        CHECK(l03::max_in_flight(s, k) == std::min(K - k, M));
        CHECK(l03::max_in_flight(g, k) == M);
      }
    }
  }
}

TEST_CASE("check_schedule names the op that runs before its input exists", "[03_model_parallel]") {
  l03::Schedule s = l03::naive_schedule(2, 1);
  std::swap(s.ticks[0], s.ticks[1]);  // F0 on stage 1 before F0 on stage 0
  CHECK(contains(error_of([&] { l03::check_schedule(s); }), "F0 on stage 1"));
}
