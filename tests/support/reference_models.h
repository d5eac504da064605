// Small models that tests build from a seed, the same in every process: a chain of Linear
// layers with ReLUs between them, and one Linear with an SGD whose gradients a test sets.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"

namespace mgpu::testing {

/// widths[0] -> widths[1] -> ... -> widths.back(): Linear layers with a ReLU between each
/// two, in f32, weights drawn after nn::manual_seed(seed) (convert with ->to(DType::f64)
/// for a reference that agrees to ~1e-12).
inline std::shared_ptr<nn::Sequential> mlp(const std::vector<std::int64_t>& widths,
                                           std::uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::Linear>(widths[i], widths[i + 1]));
  }
  return m;
}

/// One nn::Linear 4 -> 3 and an SGD(lr 0.1) on it; a test sets the gradients by hand.
struct LinearWithSgd {
  std::shared_ptr<nn::Linear> layer;  ///< the layer, weights from the seed
  std::unique_ptr<optim::SGD> sgd;    ///< SGD(lr 0.1) over the layer's parameters
  /// The layer from nn::manual_seed(seed) and its optimizer.
  explicit LinearWithSgd(std::uint64_t seed = 1) {
    nn::manual_seed(seed);
    layer = std::make_shared<nn::Linear>(4, 3);
    sgd = std::make_unique<optim::SGD>(layer->parameters(), optim::SGDOptions{0.1});
  }
  /// Every element of every gradient set to `value`.
  void set_grads(float value) {
    for (nn::Parameter* p : layer->parameters()) fill_(p->grad, value);
  }
  /// The weight's elements.
  std::vector<float> weights() const { return layer->weight().value.to_vector<float>(); }
};

}  // namespace mgpu::testing
