// Process groups for multi-rank tests: the quiet CPU group every test of a binary shares,
// and the checks and reductions every rank reports the same.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "mgpu/dist/dist.h"
#include "mgpu/tensor.h"

namespace mgpu::testing {

/// How long a test's collective waits for a rank that never joins: MGPU_DIST_TIMEOUT_S
/// where it is set (tools/grade sets a few seconds, so that a learner's deadlock is
/// reported at once), else `fallback` seconds.
inline double test_timeout_s(double fallback = 60) {
  const char* env = std::getenv("MGPU_DIST_TIMEOUT_S");
  return env && *env ? dist::default_timeout_s() : fallback;
}

/// Options of a test's group: no banner on creation, and a collective a rank never joins
/// fails after `timeout_s` seconds (< 0: the library's default, MGPU_DIST_TIMEOUT_S or 300).
inline dist::GroupOptions quiet_options(double timeout_s = -1) {
  dist::GroupOptions o;
  o.announce = false;
  o.timeout_s = timeout_s;
  return o;
}

/// The CPU (mpi) group over the world that every multi-rank test shares, created on first
/// use (every rank runs the same tests in the same order, so every rank creates it at the
/// same point). A learner's bug that hangs a collective fails the job after
/// test_timeout_s() (a minute, or MGPU_DIST_TIMEOUT_S).
inline dist::ProcessGroup& group() {
  static std::shared_ptr<dist::ProcessGroup> g =
      dist::new_group("mpi", Device::cpu(), quiet_options(test_timeout_s()));
  return *g;
}

/// A CPU (mpi) group over the world with the library's default timeout, created by the
/// first test that asks for it (the dist and io tests', which set MGPU_DIST_TIMEOUT_S).
inline dist::ProcessGroup& cpu_group() {
  static std::shared_ptr<dist::ProcessGroup> g = dist::new_group("mpi", Device::cpu(), quiet_options());
  return *g;
}

/// The world on this rank's CUDA device (dist::rank_device; ranks may share a GPU) over the
/// mpi backend, quiet, with group()'s timeout (test_timeout_s()); created on first use, on
/// every rank.
inline dist::ProcessGroup& rank_gpu_group() {
  static std::shared_ptr<dist::ProcessGroup> g = dist::new_group(
      "mpi", dist::rank_device(Device::Kind::cuda), quiet_options(test_timeout_s()));
  return *g;
}

/// True on every rank when `ok` is true on every rank: a check all ranks report the same.
inline bool all_ranks(bool ok) {
  Tensor t = Tensor::from_vector(std::vector<std::int32_t>{ok ? 1 : 0}, {1});
  group().all_reduce(t, dist::ReduceOp::min).wait();
  return t.to_vector<std::int32_t>()[0] == 1;
}

/// The largest value of `x` over the ranks.
inline double max_over_ranks(double x) {
  Tensor t = Tensor::from_vector(std::vector<double>{x}, {1});
  group().all_reduce(t, dist::ReduceOp::max).wait();
  return t.to_vector<double>()[0];
}

/// `t` summed over the ranks (a new tensor; `t` is left alone).
inline Tensor sum_over_ranks(const Tensor& t) {
  Tensor s = t.clone();
  group().all_reduce(s, dist::ReduceOp::sum).wait();
  return s;
}

}  // namespace mgpu::testing
