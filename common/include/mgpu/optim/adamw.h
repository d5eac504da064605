/// @file adamw.h
/// @brief AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW.
#pragma once

#include "mgpu/optim/optimizer.h"

namespace mgpu::optim {

/// AdamW's hyper-parameters (PyTorch's defaults).
struct AdamWOptions {
  double lr = 1e-3;            ///< learning rate
  double beta1 = 0.9;          ///< decay of the first moment (mean of g)
  double beta2 = 0.999;        ///< decay of the second moment (mean of g^2)
  double eps = 1e-8;           ///< added to the denominator
  double weight_decay = 1e-2;  ///< decoupled: p *= 1 - lr * weight_decay
};

/// For each parameter p with gradient g, at step t = 1, 2, ...:
///   p   <- p - lr * weight_decay * p                 (decoupled: not part of g)
///   m   <- beta1 * m + (1 - beta1) * g
///   v   <- beta2 * v + (1 - beta2) * g^2
///   p   <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
/// State per parameter: "exp_avg" (m), "exp_avg_sq" (v), "step" (t, an i64 scalar on the host).
class AdamW : public Optimizer {
 public:
  /// Updates `params` with `options`.
  AdamW(std::vector<nn::Parameter*> params, AdamWOptions options);
  void step() override;
  std::string describe() const override;
  /// The hyper-parameters (lr() may have changed since).
  const AdamWOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_keys() const override;

 private:
  AdamWOptions options_;
};

/// The fused AdamW update of one tensor (CPU loop or CUDA kernel): p, m, v updated in place.
/// bias_correction1/2 are 1 - beta1^t and 1 - beta2^t.
void adamw_update_(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double beta1,
                   double beta2, double eps, double weight_decay, double bias_correction1,
                   double bias_correction2);

}  // namespace mgpu::optim
