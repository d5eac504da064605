// CommLog: stamps each collective's launch and reads its completion time from the Work.
#include "mgpu/parallel/comm_log.h"

#include <chrono>

namespace mgpu::parallel {

double clock_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void CommLog::record(std::size_t index, const char* op, std::size_t bytes, const dist::Work& work,
                     double launch_s) {
  entries_.push_back(Entry{CommRecord{index, bytes, launch_s, 0.0, op}, work});
}

std::vector<CommRecord> CommLog::take() {
  std::vector<CommRecord> out;
  for (Entry& e : entries_) {
    // The communication thread stamped the Work when it finished: exact, with no thread
    // of ours watching it.
    e.work.wait();
    e.record.done_s = e.work.completion_time_s();
    out.push_back(e.record);
  }
  entries_.clear();
  return out;
}

}  // namespace mgpu::parallel
