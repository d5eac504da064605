// What the MoE layer's tests share: a one-process f64 layer whose every parameter (biases
// too) is random, drawn from a seed, so that each rank can build the same full layer.
#pragma once

#include <memory>

#include "mgpu/copy.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/moe/moe_layer.h"
#include "random_data.h"

namespace mgpu::testing {

/// An f64 MoE layer of config `c` with random parameters drawn from `seed`; the router's
/// weights doubled, which spreads the probabilities out (fewer near-ties in the top-k).
inline std::shared_ptr<parallel::moe::MoE> random_moe(const parallel::moe::MoEConfig& c,
                                                      unsigned seed) {
  nn::manual_seed(seed);
  auto m = std::make_shared<parallel::moe::MoE>(c);
  m->to(DType::f64);
  unsigned salt = seed * 100;
  for (auto& [name, p] : m->named_parameters()) {
    Tensor r = random_tensor(p->value.shape(), ++salt);
    if (name == "router.weight") scale_(r, 2.0);
    copy_(p->value, r);
  }
  return m;
}

}  // namespace mgpu::testing
