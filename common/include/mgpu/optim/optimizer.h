/// @file optimizer.h
/// @brief Optimizer: the base of SGD and AdamW, with its state exposed by name.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mgpu/nn/parameter.h"
#include "mgpu/tensor.h"

namespace mgpu::optim {

/// Updates a list of parameters from their gradients. The per-parameter state (momentum
/// buffers, Adam moments, step counts) lives in one ordered map keyed
/// "<parameter name>.<state name>", e.g. "0.weight.momentum_buffer", so a checkpoint can
/// save it and load it back bit for bit.
class Optimizer {
 public:
  /// Updates `params` (their names must differ) with learning rate `lr`.
  Optimizer(std::vector<nn::Parameter*> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that requires a gradient.
  virtual void step() = 0;
  /// A one-line description with the hyper-parameters.
  virtual std::string describe() const = 0;
  /// grad <- 0 for every parameter.
  void zero_grad();

  /// The learning rate.
  double lr() const { return lr_; }
  /// For learning-rate schedules.
  void set_lr(double lr) { lr_ = lr; }
  /// The parameters, in the order given.
  const std::vector<nn::Parameter*>& params() const { return params_; }

  /// Every state tensor by name. Empty until the first step() creates it.
  const std::map<std::string, Tensor>& state() const { return state_; }
  /// Replaces the state with copies of `state` (as saved from state()), each moved to its
  /// parameter's device; step counters stay on the host. Throws on a name that belongs to
  /// no parameter of this optimizer, or a shape that does not match it, and, when `state`
  /// is not empty, on a state tensor missing for a parameter that requires a gradient.
  void load_state(const std::map<std::string, Tensor>& state);

 protected:
  /// The state tensor `key` of `p`, or nullptr before it exists.
  Tensor* find_state(const nn::Parameter& p, const std::string& key);
  /// Creates (or replaces) state tensor `key` of `p`.
  Tensor& set_state(const nn::Parameter& p, const std::string& key, Tensor value);
  /// Names of the state tensors one parameter has (checked by load_state).
  virtual std::vector<std::string> state_keys() const = 0;

 private:
  std::vector<nn::Parameter*> params_;
  double lr_;
  std::map<std::string, Tensor> state_;
};

}  // namespace mgpu::optim
