// Shared by the data tests: a dataset whose samples name themselves.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/data/all.h"

namespace datatest {

/// n samples whose label is their index (a dataset of distinct labels) and whose features
/// are factors[k] * index; counts its reads; sample `fail_at` is unreadable.
class NumberedDataset : public mgpu::data::Dataset {
 public:
  NumberedDataset(std::int64_t n, std::vector<float> factors, std::int64_t fail_at = -1)
      : n_(n), fail_at_(fail_at), factors_(std::move(factors)) {}
  std::int64_t size() const override { return n_; }
  mgpu::Shape sample_shape() const override { return {static_cast<std::int64_t>(factors_.size())}; }
  std::int64_t num_classes() const override { return n_; }
  std::int64_t get(std::int64_t i, float* f) const override {
    reads_.fetch_add(1);
    MGPU_CHECK(i != fail_at_, "NumberedDataset: sample ", i, " is unreadable");
    for (std::size_t k = 0; k < factors_.size(); ++k) f[k] = factors_[k] * static_cast<float>(i);
    return i;
  }
  std::string describe() const override { return "numbered"; }
  std::int64_t reads() const { return reads_.load(); }

 private:
  std::int64_t n_, fail_at_;
  std::vector<float> factors_;
  mutable std::atomic<std::int64_t> reads_{0};
};

}  // namespace datatest
