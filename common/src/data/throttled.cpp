// ThrottledDataset: every read waits first (see throttled.h).
#include "mgpu/data/throttled.h"

#include <chrono>
#include <sstream>
#include <thread>

#include "mgpu/error.h"

namespace mgpu::data {

ThrottledDataset::ThrottledDataset(std::shared_ptr<const Dataset> inner, double latency_s)
    : inner_(std::move(inner)), latency_s_(latency_s) {
  MGPU_CHECK(inner_ != nullptr, "ThrottledDataset: dataset is null");
  MGPU_CHECK(latency_s_ >= 0, "ThrottledDataset: latency must be >= 0 s, got ", latency_s_);
}

std::int64_t ThrottledDataset::get(std::int64_t i, float* features) const {
  // Sleep until a deadline rather than for a duration, so a late wake-up is not added twice.
  std::this_thread::sleep_until(std::chrono::steady_clock::now() +
                                std::chrono::duration<double>(latency_s_));
  return inner_->get(i, features);
}

std::string ThrottledDataset::describe() const {
  std::ostringstream s;
  s << inner_->describe() << ", each sample read after " << latency_s_ * 1e6
    << " us (emulated slow storage)";
  return s.str();
}

}  // namespace mgpu::data
