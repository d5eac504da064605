/// @file throttled.h
/// @brief ThrottledDataset: a dataset behind slow storage, to make data loading the
/// bottleneck on purpose.
///
/// Every sample read first waits `latency_s` (a sleep: the thread waits, the core is free),
/// as a read from a network file system or a cold disk would. With the DataLoader's
/// num_workers = 0 the training step pays that wait for every sample of its batch; N
/// workers wait for N batches at once, behind the step's compute.
#pragma once

#include <memory>
#include <string>

#include "mgpu/data/dataset.h"

namespace mgpu::data {

/// `inner`'s samples, each read after a wait of latency_s seconds (see the file comment).
class ThrottledDataset : public Dataset {
 public:
  /// Throws for a negative latency or a null dataset.
  ThrottledDataset(std::shared_ptr<const Dataset> inner, double latency_s);
  std::int64_t size() const override { return inner_->size(); }
  Shape sample_shape() const override { return inner_->sample_shape(); }
  std::int64_t num_classes() const override { return inner_->num_classes(); }
  std::int64_t get(std::int64_t i, float* features) const override;
  std::string describe() const override;
  /// The wait per sample, seconds.
  double latency_s() const { return latency_s_; }

 private:
  std::shared_ptr<const Dataset> inner_;
  double latency_s_;
};

}  // namespace mgpu::data
