// Shared by lesson 03's graded tests: a small f64 model, its split, and comparisons.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mgpu/nn/all.h"
#include "mgpu/tensor.h"
#include "pipeline.h"

namespace lesson03_test {

using mgpu::Device;
using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;
namespace nn = mgpu::nn;
namespace l03 = mgpu::lesson03;

inline std::vector<Device> cpus(int k, int first = 0) {
  std::vector<Device> d;
  for (int i = 0; i < k; ++i) d.push_back(Device::cpu(first + i));
  return d;
}

/// 5 -> 16 -> 16 -> 12 -> 4 with ReLUs: seven layers, f64 so that a split model and the
/// whole one agree to ~1e-12.
inline std::shared_ptr<nn::Sequential> small_model(std::uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Linear>(5, 16));
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(16, 16));
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(16, 12));
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(12, 4));
  m->to(DType::f64);
  return m;
}

/// Stage boundaries of small_model for K = 1..4 stages: a cut after each ReLU.
inline std::vector<std::size_t> boundaries_for(int k) {
  const std::vector<std::size_t> all = {2, 4, 6};
  return std::vector<std::size_t>(all.begin(), all.begin() + (k - 1));
}

inline Tensor random_tensor(const Shape& shape, unsigned salt) {
  std::mt19937 gen(Catch::rngSeed() * 7919u + salt * 104729u);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(mgpu::shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape);
}

inline Tensor random_labels(std::int64_t n, std::int64_t classes, unsigned salt) {
  std::mt19937 gen(Catch::rngSeed() * 31u + salt);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::int64_t>(gen() % static_cast<unsigned>(classes));
  return Tensor::from_vector(v, {n});
}

/// Largest |a - b| / (|b| + 1), on any devices.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(x[i] - y[i]) / (std::fabs(y[i]) + 1.0));
  return worst;
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

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mgpu::Error& e) {
    return e.what();
  }
  FAIL("expected an mgpu::Error, nothing was thrown");
  return "";
}

}  // namespace lesson03_test
