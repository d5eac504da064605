/// @file dropout.h
/// @brief Dropout with a seeded, counter-based mask (the same on the CPU and every GPU).
#pragma once

#include <cstdint>

#include "mgpu/nn/layer.h"

namespace mgpu::nn {

/// Training mode: zeroes each element with probability p and scales the rest by 1/(1-p),
/// so the expected output equals the input. Eval mode: the identity.
/// The k-th training forward draws its mask from mix_seed(seed, k): reproducible run to run.
class Dropout : public Layer<Dropout, Tensor> {
 public:
  /// seed 0 takes the next seed of the initialisation sequence (init.h).
  explicit Dropout(double p = 0.5, std::uint64_t seed = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// Probability of zeroing an element.
  double p() const { return p_; }
  /// The seed the masks derive from.
  std::uint64_t seed() const { return seed_; }
  /// Training forwards so far (the counter that picks the next mask).
  std::uint64_t calls() const { return calls_; }
  /// Rewinds or restores the counter (checkpoints; gradient checks).
  void set_calls(std::uint64_t calls) { calls_ = calls; }

 private:
  double p_;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
};

}  // namespace mgpu::nn
