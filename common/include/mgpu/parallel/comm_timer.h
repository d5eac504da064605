/// @file comm_timer.h
/// @brief CommTimer: when each bucket's communication started and finished, for traces and
/// benchmarks. The Reducer works the same with or without one.
///
///     parallel::CommTimer timer;
///     ddp.reducer().set_comm_timer(&timer);     // from now on every launch is timed
///     ... ddp.forward(x); ddp.backward(g); ...
///     for (const BucketTiming& t : timer.take()) trace(t.bucket, t.launch_s, t.done_s);
///
/// The launch time is taken when the Reducer hands the bucket to the comm hook; the
/// completion time is the moment the group's communication thread finished the
/// collective (dist::Work::completion_time_s), however late finalize_backward waits for it.
#pragma once

#include <cstddef>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/parallel/ddp/comm_hook.h"

namespace mgpu::parallel {

/// Seconds on std::chrono::steady_clock: the time base of CommTimer and of
/// dist::Work::completion_time_s.
double clock_s();

/// One bucket's communication.
struct BucketTiming {
  std::size_t bucket = 0;  ///< which bucket
  std::size_t bytes = 0;   ///< its size
  double launch_s = 0;     ///< clock_s() when the comm hook was called
  double done_s = 0;       ///< clock_s() when the collective completed (0 while it runs)
};

/// Times every bucket launch of the Reducer it is installed on (Reducer::set_comm_timer).
class CommTimer {
 public:
  /// Runs `hook` on `bucket` and remembers the launch time and the collective's Work.
  CommFuture run(const CommHook& hook, dist::ProcessGroup& group, GradBucket& bucket);
  /// The buckets launched since the last take(), in launch order, with their completion
  /// times, and forgets them. Call it after ddp.backward(): every bucket has completed then.
  std::vector<BucketTiming> take();

 private:
  struct Launch {
    BucketTiming timing;
    dist::Work work;
  };
  std::vector<Launch> launches_;
};

}  // namespace mgpu::parallel
