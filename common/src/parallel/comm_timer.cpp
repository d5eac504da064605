// CommTimer: stamps each bucket's launch and reads its completion time from the Work.
#include "mgpu/parallel/comm_timer.h"

#include <chrono>

namespace mgpu::parallel {

double clock_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

CommFuture CommTimer::run(const CommHook& hook, dist::ProcessGroup& group, GradBucket& bucket) {
  const double launch = clock_s();
  CommFuture future = hook(group, bucket);
  launches_.push_back(Launch{BucketTiming{bucket.index, bucket.buffer.nbytes(), launch, 0.0},
                             future.work});
  return future;
}

std::vector<BucketTiming> CommTimer::take() {
  std::vector<BucketTiming> out;
  for (Launch& l : launches_) {
    // The communication thread stamped the Work when it finished: exact, with no thread
    // of ours watching it.
    l.timing.done_s = l.work.completion_time_s();
    out.push_back(l.timing);
  }
  launches_.clear();
  return out;
}

}  // namespace mgpu::parallel
