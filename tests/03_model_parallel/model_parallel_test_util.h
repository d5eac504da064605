// Shared by lesson 03's graded tests: a small f64 model, its split, and comparisons.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "devices.h"
#include "error_measures.h"
#include "expect_error.h"
#include "mgpu/nn/all.h"
#include "mgpu/tensor.h"
#include "pipeline.h"
#include "random_data.h"
#include "reference_models.h"

namespace lesson03_test {

using namespace mgpu;  // Device, DType, Shape, Tensor, nn
namespace l03 = mgpu::lesson03;

using namespace mgpu::testing;  // CPU devices, random data, error measures, error_of

/// 5 -> 16 -> 16 -> 12 -> 4 with ReLUs: seven layers, f64 so that a split model and the
/// whole one agree to ~1e-12.
inline std::shared_ptr<nn::Sequential> small_model(std::uint64_t seed) {
  auto m = mgpu::testing::mlp({5, 16, 16, 12, 4}, seed);
  m->to(DType::f64);
  return m;
}

/// Stage boundaries of small_model for K = 1..4 stages: a cut after each ReLU.
inline std::vector<std::size_t> boundaries_for(int k) {
  const std::vector<std::size_t> all = {2, 4, 6};
  return std::vector<std::size_t>(all.begin(), all.begin() + (k - 1));
}

/// The full-batch reference: mean cross-entropy over the whole batch on one device.
/// Returns the loss; the model's grads hold its gradient.
inline double full_batch_step(nn::Module& model, const Tensor& x, const Tensor& labels) {
  model.zero_grad();
  nn::CrossEntropyLoss loss;
  const double value = loss.forward(model.forward(x), labels).item();
  model.backward(loss.backward());
  return value;
}

/// Every parameter gradient of `model` equals the one of `reference` (same layout).
inline void check_same_grads(nn::Module& model, nn::Module& reference, double tol) {
  const auto mine = model.named_parameters(), theirs = reference.named_parameters();
  REQUIRE(mine.size() == theirs.size());
  for (std::size_t j = 0; j < mine.size(); ++j) {
    INFO("parameter " << mine[j].first);
    CHECK(max_rel_diff(mine[j].second->grad, theirs[j].second->grad) < tol);
  }
}

}  // namespace lesson03_test
