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
#include "devices.h"
#include "error_measures.h"
#include "expect_error.h"
#include "mgpu/nn/all.h"
#include "mgpu/tensor.h"
#include "random_data.h"
#include "reference_models.h"

namespace lesson02_test {

using mgpu::Device;
using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;
namespace nn = mgpu::nn;

using namespace mgpu::testing;  // CPU devices, random data, error measures, error_of

/// 6 -> 8 -> ReLU -> 3, in f64 so DataParallel and one device agree to ~1e-12.
/// With `frozen_bias` the first layer's bias is frozen (a parameter without a gradient).
inline std::shared_ptr<nn::Sequential> small_mlp(std::uint64_t seed, bool frozen_bias = false) {
  auto m = mgpu::testing::mlp({6, 8, 3}, seed);
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

}  // namespace lesson02_test
