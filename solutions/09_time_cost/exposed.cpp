// Lesson 09, task 1: how much of a step's communication was exposed.
//
// DDP launches each bucket's all-reduce while backward still runs. What costs time is only
// the communication that nothing computes under: the part of the buckets' time that lies
// outside backward. Buckets can be in flight together (the group works on several, or a
// timeline records a launch before the previous one finished), so what counts is the
// intervals' union: two buckets in flight at once are one stretch of busy link.
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
  // What you have: buckets (Intervals {begin, end} with length(), one per bucket's
  // all-reduce); compute (the window, an Interval); split (CommSplit: busy_s, exposed_s,
  // hidden_s, all 0 now); std::max, std::min, std::sort.
  // TODO(task1) BEGIN: chapter §2's busy, hidden and exposed time of the buckets against
  // the compute window, in seconds: time during which two buckets were in flight at once
  // counts once; exposed_s = busy_s - hidden_s. The buckets come in any order and may
  // overlap, nest or touch, be empty, and lie partly or wholly outside the window; no
  // buckets: all zero. time_cost.h's example is one of the tests. Stuck: tools/hint 09 1
  // (about 20 lines).
  std::vector<Interval> sorted = buckets;
  std::sort(sorted.begin(), sorted.end(),
            [](const Interval& x, const Interval& y) { return x.begin < y.begin; });
  auto add_stretch = [&](double a, double b) {
    split.busy_s += b - a;
    split.hidden_s += std::max(0.0, std::min(b, compute.end) - std::max(a, compute.begin));
  };
  bool open = false;
  double a = 0, b = 0;
  for (const Interval& iv : sorted) {
    if (open && iv.begin <= b) {
      b = std::max(b, iv.end);  // overlaps (or touches) the current stretch: extend it
      continue;
    }
    if (open) add_stretch(a, b);
    a = iv.begin;
    b = iv.end;
    open = true;
  }
  if (open) add_stretch(a, b);
  split.exposed_s = split.busy_s - split.hidden_s;
  // TODO(task1) END
  return split;
}

}  // namespace mgpu::perf
