// Shared by lesson 02's graded tests: small models, random batches, comparisons.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data_parallel.h"
#include "mgpu/nn/all.h"
#include "mgpu/tensor.h"

namespace lesson02_test {

using mgpu::Device;
using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;
namespace nn = mgpu::nn;

inline std::vector<Device> cpus(int k, int first = 0) {
  std::vector<Device> d;
  for (int i = 0; i < k; ++i) d.push_back(Device::cpu(first + i));
  return d;
}

/// Uniform values in [-1, 1), seeded from Catch's --rng-seed and a salt.
inline Tensor random_tensor(const Shape& shape, unsigned salt, DType dtype = DType::f64,
                            const Device& device = Device::cpu()) {
  std::mt19937 gen(Catch::rngSeed() * 7919u + salt * 104729u);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(mgpu::shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape, device).to(dtype);
}

inline Tensor random_labels(std::int64_t n, std::int64_t classes, unsigned salt,
                            const Device& device = Device::cpu()) {
  std::mt19937 gen(Catch::rngSeed() * 31u + salt);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::int64_t>(gen() % static_cast<unsigned>(classes));
  return Tensor::from_vector(v, {n}, device);
}

/// 6 -> 8 -> ReLU -> 3, in f64 so DataParallel and one device agree to ~1e-12.
/// With `frozen_bias` the first layer's bias is frozen (a parameter without a gradient).
inline std::shared_ptr<nn::Sequential> small_mlp(std::uint64_t seed, bool frozen_bias = false) {
  nn::manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Linear>(6, 8));
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(8, 3));
  m->to(DType::f64);
  if (frozen_bias) m->parameter("0.bias").set_requires_grad(false);
  return m;
}

/// The same MLP with a BatchNorm1d after the first layer.
inline std::shared_ptr<nn::Sequential> small_bn_mlp(std::uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Linear>(6, 8));
  m->add(std::make_shared<nn::BatchNorm1d>(8));
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(8, 3));
  m->to(DType::f64);
  return m;
}

/// Largest |a - b| / (|b| + 1): both on any device, any float dtype.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(x[i] - y[i]) / (std::fabs(y[i]) + 1.0));
  return worst;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The message of the mgpu::Error `f` throws; fails the test if it throws none.
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

}  // namespace lesson02_test
