/// @file batchnorm.h
/// @brief BatchNorm1d / BatchNorm2d with PyTorch's semantics (local batch statistics).
#pragma once

#include <cstdint>

#include "mgpu/nn/functional.h"
#include "mgpu/nn/layer.h"

namespace mgpu::nn {

/// Normalises each channel with the batch's mean and variance in training mode, and with
/// the running estimates in eval mode. As in PyTorch: running = (1 - momentum) * running
/// + momentum * batch, where the running variance takes the unbiased batch variance
/// (count / (count - 1) times the biased one that normalises the batch).
/// Parameters "weight" (gamma, ones) and "bias" (beta, zeros); buffers "running_mean",
/// "running_var", "num_batches_tracked".
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// C, the number of channels.
  std::int64_t num_features() const { return features_; }
  /// Added to the variance before the square root.
  double eps() const { return eps_; }
  /// Weight of the new batch in the running statistics.
  double momentum() const { return momentum_; }
  /// Whether there is a learned scale and shift.
  bool affine() const { return affine_; }
  /// gamma [C]; throws when affine is false.
  Parameter& weight();
  /// beta [C]; throws when affine is false.
  Parameter& bias();
  /// Running mean [C] (buffer "running_mean").
  Tensor& running_mean() { return buffer_at(0); }
  /// Running unbiased variance [C] (buffer "running_var").
  Tensor& running_var() { return buffer_at(1); }
  /// Training forwards so far, an i64 scalar (buffer "num_batches_tracked").
  Tensor& num_batches_tracked() { return buffer_at(2); }

 protected:
  /// `kind` names the layer in messages; inputs have min_dims..max_dims dimensions.
  BatchNorm(const char* kind, int min_dims, int max_dims, std::int64_t num_features,
            double eps, double momentum, bool affine);
  /// Copies everything (clone() then drops the saved contexts).
  BatchNorm(const BatchNorm&) = default;
  void clear_saved_self() override { saved_.clear(); }
  std::size_t saved_self() const override { return saved_.size(); }
  /// Throws unless x has C = num_features channels and an accepted rank.
  void check_input(const Tensor& x) const;

 private:
  struct Saved {
    Tensor x, mean, invstd;
    std::int64_t count = 0;
    bool batch_stats = true;  // false: eval mode, normalised with running statistics
  };
  const char* kind_;
  int min_dims_, max_dims_;
  std::int64_t features_;
  double eps_, momentum_;
  bool affine_;
  std::size_t weight_ = 0, bias_ = 0;
  SavedContexts<Saved> saved_;
};

/// Input [N, C] or [N, C, L].
class BatchNorm1d : public Layer<BatchNorm1d, void, BatchNorm> {
 public:
  /// num_features channels; eps, momentum and affine as in PyTorch.
  explicit BatchNorm1d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : Layer("BatchNorm1d", 2, 3, num_features, eps, momentum, affine) {}
};

/// Input [N, C, H, W].
class BatchNorm2d : public Layer<BatchNorm2d, void, BatchNorm> {
 public:
  /// num_features channels; eps, momentum and affine as in PyTorch.
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : Layer("BatchNorm2d", 4, 4, num_features, eps, momentum, affine) {}
};

}  // namespace mgpu::nn
