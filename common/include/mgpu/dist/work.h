/// @file work.h
/// @brief Work: the handle an asynchronous communication op returns (c10d's Work).
///
/// Every ProcessGroup op returns at once with a Work; the op runs on the group's
/// communication thread (and, for NCCL, on the device's comm stream). wait() blocks until
/// the op's results are in place and visible to the host and to every stream, and rethrows
/// the op's error if it failed. Dropping a Work without waiting is allowed: the op still
/// runs, and the tensors it uses stay alive until it is done.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace mgpu::dist {

namespace detail {
struct WorkState;
}

/// Handle to one asynchronous op; copies share the same op (see the file comment).
class Work {
 public:
  /// A Work that is already complete (what an empty batch returns).
  Work() = default;
  /// Wraps the op's shared state (made by the group's engine, not by users).
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  /// Blocks until the op is complete; throws mgpu::Error if it failed.
  void wait() const;
  /// True once the op has finished (successfully or not). Never blocks.
  bool is_completed() const;
  /// True once the op has finished without error.
  bool is_success() const;
  /// When the op finished, in seconds of std::chrono::steady_clock (its time_since_epoch):
  /// the moment the communication thread completed it, however late the caller waits.
  /// 0 while it runs, and for a default-constructed Work.
  double completion_time_s() const;
  /// "all_reduce #3 f32[1000] (mpi)": which op this is, for messages.
  std::string describe() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

/// Waits for every Work in order; rethrows the first error.
void wait_all(const std::vector<Work>& works);

}  // namespace mgpu::dist
