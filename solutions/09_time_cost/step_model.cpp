// Lesson 09, task 3: the alpha-beta-compute model of a DDP step, with overlap.
//
//   time 0 = start of backward
//   compute  |==forward==|=============backward=============|...exposed...|=optimizer=|
//   comm                        [bucket 0]  [bucket 1]     [ bucket 2 ]
//                               ^ready 0    ^ready 1        ^ready 2 = end of backward
//
// Each bucket's all-reduce costs what lesson 04's ring costs: 2(N-1) alpha + 2(N-1)/N
// bytes beta. Buckets share one communication channel and go in launch order, so a bucket
// starts when it is ready AND the one before it is done. Whatever still runs when
// backward ends is exposed: the step waits for it.
#include <algorithm>

#include "mgpu/perf/time_cost.h"

namespace mgpu::perf {

StepPrediction predict_step(const Workload& w, std::int64_t batch_per_rank, int ranks,
                            const AlphaBeta& link) {
  MGPU_CHECK(ranks >= 1, "predict_step: ranks must be >= 1, got ", ranks);
  MGPU_CHECK(batch_per_rank >= 1, "predict_step: the batch must be >= 1, got ", batch_per_rank);
  MGPU_CHECK(w.bucket_bytes.size() == w.bucket_ready.size(), "predict_step: ",
             w.bucket_bytes.size(), " bucket sizes but ", w.bucket_ready.size(),
             " ready fractions; give one of each per bucket");
  for (std::size_t k = 0; k < w.bucket_ready.size(); ++k) {
    MGPU_CHECK(w.bucket_ready[k] >= 0 && w.bucket_ready[k] <= 1, "predict_step: bucket ", k,
               " is ready at ", w.bucket_ready[k], " of backward; use a fraction in [0, 1]");
    MGPU_CHECK(k == 0 || w.bucket_ready[k] >= w.bucket_ready[k - 1], "predict_step: bucket ", k,
               " is ready before bucket ", k - 1, "; buckets launch in order");
  }
  StepPrediction p;
  // What you have: w (Workload: forward_s_per_sample, backward_s_per_sample, fixed_s, and
  // bucket_bytes and bucket_ready in launch order, checked above); batch_per_rank, ranks,
  // link; p (StepPrediction: comm_s, compute_s, exposed_s, samples_per_s, step_s, all 0
  // now); ring_allreduce_seconds(link, bytes, p) (0 on one rank); std::max.
  // TODO(task3) BEGIN: the step chapter §4's model predicts, on its assumptions (time 0 at
  // the start of backward, one communication channel, the buckets in launch order, none
  // before it is ready), every field of p as time_cost.h defines it: comm_s counts every
  // bucket's all-reduce, hidden or not; exposed_s is never negative; samples_per_s counts
  // the samples of every rank. Tested on steps worked by hand: one rank, the last bucket
  // exposed, a bucket queued behind the one before it, four ranks. Stuck: tools/hint 09 3
  // (about 15 lines).
  const double batch = static_cast<double>(batch_per_rank);
  const double forward = batch * w.forward_s_per_sample;
  const double backward = batch * w.backward_s_per_sample;
  double free = 0;
  for (std::size_t k = 0; k < w.bucket_bytes.size(); ++k) {
    const double cost = ring_allreduce_seconds(link, w.bucket_bytes[k], ranks);
    const double start = std::max(w.bucket_ready[k] * backward, free);
    free = start + cost;
    p.comm_s += cost;
  }
  p.exposed_s = std::max(0.0, free - backward);
  p.compute_s = forward + backward;
  p.step_s = w.fixed_s + p.compute_s + p.exposed_s;
  p.samples_per_s = p.step_s > 0 ? ranks * batch / p.step_s : 0;
  // TODO(task3) END
  return p;
}

}  // namespace mgpu::perf
