// Work: waiting on the state the communication thread fills in.
#include "mgpu/dist/work.h"

#include "engine.h"

namespace mgpu::dist {

void Work::wait() const {
  if (!state_) return;
  if (state_->on_wait) state_->on_wait();
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [this] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::is_completed() const {
  if (!state_) return true;
  if (state_->on_wait) state_->on_wait();
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

bool Work::is_success() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done && !state_->error;
}

double Work::completion_time_s() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->done) return 0;
  return std::chrono::duration<double>(state_->finished_at.time_since_epoch()).count();
}

std::string Work::describe() const { return state_ ? state_->what : "completed no-op"; }

void wait_all(const std::vector<Work>& works) {
  for (const Work& w : works) w.wait();
}

}  // namespace mgpu::dist
