/// @file comm_log.h
/// @brief CommLog: when each collective of DDP's buckets or of a sharded model's units was
/// launched and when it finished, with its bytes, for traces, benchmarks and byte counts.
/// DDP and sharding work the same with or without one.
///
///     parallel::CommLog log;
///     ddp.reducer().set_comm_log(&log);        // from now on every bucket is recorded
///     ... ddp.forward(x); ddp.backward(g); ...
///     for (const CommRecord& c : log.take()) trace(c.index, c.launch_s, c.done_s);
///
/// ShardedDataParallel keeps its own (take_comm_log()); a ShardedUnit records into the log
/// it is given. A bucket's launch time is taken when the Reducer hands it to the comm
/// hook, a unit's when it issued the collective; the completion time is the moment the
/// group's communication thread finished the collective (dist::Work::completion_time_s),
/// however late anyone waits for it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mgpu/dist/work.h"

namespace mgpu::parallel {

/// Seconds on std::chrono::steady_clock: the time base of CommLog and of
/// dist::Work::completion_time_s.
double clock_s();

/// One collective.
struct CommRecord {
  std::size_t index = 0;  ///< who issued it: the bucket (DDP) or the unit (forward order)
  std::size_t bytes = 0;  ///< the bucket's size; a unit's: the full (unsharded) buffer's
  double launch_s = 0;    ///< clock_s() when it was launched
  double done_s = 0;      ///< clock_s() when the collective completed (0 while it runs)
  std::string op;         ///< "all-reduce", "all-gather" or "reduce-scatter"
};

/// The collectives of DDP's buckets (Reducer::set_comm_log) or of a sharded model's units,
/// in the order they were launched.
class CommLog {
 public:
  /// Remembers a collective launched at `launch_s` (clock_s()); its Work gives the
  /// completion time later.
  void record(std::size_t index, const char* op, std::size_t bytes, const dist::Work& work,
              double launch_s);
  /// The collectives recorded since the last take(), with their completion times (waits
  /// for each, so call it after the step: after ddp.backward() every bucket has
  /// completed), and forgets them.
  std::vector<CommRecord> take();

 private:
  struct Entry {
    CommRecord record;
    dist::Work work;
  };
  std::vector<Entry> entries_;
};

}  // namespace mgpu::parallel
