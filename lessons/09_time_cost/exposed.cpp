// Lesson 09, task 1: how much of a step's communication was exposed.
//
// DDP launches each bucket's all-reduce while backward still runs. What costs time is only
// the communication that nothing computes under: the part of the buckets' time that lies
// outside backward. Buckets can be in flight together (the group works on several, or a
// timeline records a launch before the previous one finished), so first merge the
// intervals into their union: two buckets in flight at once are one stretch of busy link.
#include <algorithm>

#include "mgpu/perf/time_cost.h"

namespace mgpu::perf {

CommSplit split_communication(const std::vector<Interval>& buckets, Interval compute) {
  MGPU_CHECK(compute.end >= compute.begin, "split_communication: the compute window ends (",
             compute.end, ") before it begins (", compute.begin, ")");
  for (std::size_t k = 0; k < buckets.size(); ++k)
    MGPU_CHECK(buckets[k].end >= buckets[k].begin, "split_communication: bucket ", k,
               "'s all-reduce ends (", buckets[k].end, ") before it begins (",
               buckets[k].begin, ")");
  CommSplit split;
  // What you have: buckets (Interval {begin, end}, length(); in any order, possibly
  // overlapping, nested or touching); compute; split.busy_s, hidden_s, exposed_s;
  // std::sort, std::min, std::max.
  // TODO(task1) BEGIN: chapter §2's split (time_cost.h's example is a test): busy_s the
  // length of the union of the buckets' intervals (time two buckets share counts once),
  // hidden_s the length of that union's intersection with `compute`, exposed_s the rest of
  // busy_s. No buckets: all zero (about 20 lines).
  throw Error("TODO(task1): split_communication is not written yet (lessons/09_time_cost/exposed.cpp)");
  // TODO(task1) END
  return split;
}

}  // namespace mgpu::perf
