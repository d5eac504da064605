// Lesson 15, task 2 in one process: the interleaved 1F1B order. Valid (every op once, on
// each rank each micro-batch's forward through a chunk before its backward, no deadlock
// across ranks), its bubble on the clock (idle slots over busy ones) exactly (p-1)/(v·m),
// and the micro-batches a rank holds at once bounded as Megatron-LM's schedule bounds them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mgpu/parallel/pp/pipe_schedule.h"

using namespace mgpu::parallel::pp;

namespace {

std::vector<std::vector<PipeOp>> interleaved(int p, int v, int m) {
  std::vector<std::vector<PipeOp>> orders;
  for (int r = 0; r < p; ++r) orders.push_back(interleaved_order(p, v, m, r));
  return orders;
}

// The most (micro-batch, chunk) forwards a rank holds whose backward has not run.
int peak_in_flight(const std::vector<PipeOp>& order) {
  int live = 0, peak = 0;
  for (const PipeOp& o : order) {
    live += o.pass == Pass::forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

TEST_CASE("task2: interleaved_order: p 2, v 2, m 4 as chapter section 3 numbers the ops",
          "[15_3d_parallel][task2][points:2]") {
  const auto f = [](int j, int c) { return PipeOp{Pass::forward, j, c}; };
  const auto b = [](int j, int c) { return PipeOp{Pass::backward, j, c}; };
  // Rank 0: warm-up 2(p-1) + (v-1)p = 4 forwards, then forward/backward pairs, then drain.
  CHECK(interleaved_order(2, 2, 4, 0) ==
        std::vector<PipeOp>{f(0, 0), f(1, 0), f(0, 1), f(1, 1), f(2, 0), b(0, 1), f(3, 0), b(1, 1),
                            f(2, 1), b(0, 0), f(3, 1), b(1, 0), b(2, 1), b(3, 1), b(2, 0), b(3, 0)});
  // v = 1 is a plain pipeline: all ops on chunk 0, every micro-batch once each way.
  const auto plain = interleaved_order(3, 1, 5, 1);
  CHECK(plain.size() == 10u);
  CHECK(std::all_of(plain.begin(), plain.end(), [](const PipeOp& o) { return o.chunk == 0; }));
  CHECK_THROWS(interleaved_order(2, 2, 3, 0));  // m not a multiple of p
}

TEST_CASE("task2: interleaved_order is valid and its bubble on the clock is (p-1)/(v*m)",
          "[15_3d_parallel][task2][points:4]") {
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 3 * p; m += p) {
        INFO("p " << p << ", v " << v << ", m " << m);
        const auto orders = interleaved(p, v, m);
        const Timeline t = simulate(orders, p, v, m);  // throws if invalid or deadlocked
        CHECK(t.busy_slots() == 2L * m * v * p);
        CHECK(std::abs(t.bubble() - bubble_formula(p, v, m)) < 1e-12);
        CHECK(t.span() == 2 * m * v + 2 * (p - 1));
        for (int r = 0; r < p; ++r)  // never more than the warm-up's forwards plus one
          CHECK(peak_in_flight(orders[static_cast<std::size_t>(r)]) <=
                std::min(2 * (p - 1 - r) + (v - 1) * p + 1, m * v));
      }
  // v chunks shorten the bubble v times against 1F1B on the same clock (ops v times shorter).
  std::vector<std::vector<PipeOp>> one;
  for (int r = 0; r < 4; ++r) one.push_back(one_f_one_b_order(4, 8, r));
  CHECK(std::abs(simulate(one, 4, 1, 8).bubble() - 3.0 / 8.0) < 1e-12);
  CHECK(std::abs(simulate(interleaved(4, 2, 8), 4, 2, 8).bubble() - 3.0 / 16.0) < 1e-12);
}
