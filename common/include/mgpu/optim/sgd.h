/// @file sgd.h
/// @brief SGD with momentum and weight decay, with PyTorch's update rule. step() is lesson
/// 01's task 2 (lessons/01_single_gpu/sgd.cpp; the library compiles the reference,
/// solutions/01_single_gpu/), the rest sgd_optimizer.cpp's.
#pragma once

#include "mgpu/optim/optimizer.h"

namespace mgpu::optim {

/// SGD's hyper-parameters.
struct SGDOptions {
  double lr = 0.01;            ///< learning rate
  double momentum = 0.0;       ///< 0: plain SGD
  double weight_decay = 0.0;   ///< L2 penalty, added to the gradient
};

/// For each parameter p with gradient g (PyTorch's torch.optim.SGD, dampening 0, no Nesterov):
///   g   <- g + weight_decay * p
///   buf <- g                       on the first step
///   buf <- momentum * buf + g      afterwards
///   p   <- p - lr * buf            (p - lr * g when momentum is 0)
/// State per parameter: "momentum_buffer" (only when momentum is not 0).
class SGD : public Optimizer {
 public:
  /// Updates `params` with `options`.
  SGD(std::vector<nn::Parameter*> params, SGDOptions options);
  /// One update of every parameter that requires a gradient (lesson 01's task 2).
  void step() override;
  std::string describe() const override;
  /// The hyper-parameters (lr() may have changed since).
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_keys() const override;

 private:
  SGDOptions options_;
};

}  // namespace mgpu::optim
