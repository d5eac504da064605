// The clock lesson 04's two benchmarks share (bench_allreduce, bench_all_to_all): the
// seconds of a collective as its slowest rank sees them, a contender's rounds as median,
// fastest and slowest, and the machine's load, printed with every table.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "mgpu/dist/dist.h"
#include "mgpu/tensor.h"

namespace lesson04_bench {

/// Timed calls per round at least, however long one call takes.
constexpr int kMinCalls = 3;

/// Seconds per call of `op` over `iters` calls, the slowest rank's: a collective is only as
/// fast as its last rank. `ctl` is a CPU group for the clock's barrier and the max.
inline double time_op(mgpu::dist::ProcessGroup& ctl, const std::function<void()>& op, int iters) {
  ctl.barrier().wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) op();
  const double mine =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  mgpu::Tensor t = mgpu::Tensor::from_vector(std::vector<double>{mine}, {1});
  ctl.all_reduce(t, mgpu::dist::ReduceOp::max).wait();
  return t.to_vector<double>()[0];
}

/// One contender's timed rounds (seconds): the median, the fastest, the slowest.
struct Timing {
  std::vector<double> rounds;  ///< one time_op result a round
  double median() const {
    std::vector<double> s = rounds;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    return n == 0 ? 0 : n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  }
  double min() const { return rounds.empty() ? 0 : *std::min_element(rounds.begin(), rounds.end()); }
  double max() const { return rounds.empty() ? 0 : *std::max_element(rounds.begin(), rounds.end()); }
};

/// "0.52 1.03 1.20": the 1, 5 and 15 minute load averages of this node (other work on it).
inline std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

}  // namespace lesson04_bench
