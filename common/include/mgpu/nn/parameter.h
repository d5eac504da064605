/// @file parameter.h
/// @brief Parameter: a trainable tensor, its gradient, and the hooks that fire when the
/// gradient is final.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::nn {

/// A trainable tensor of a module. `value` holds the weights, `grad` the gradient summed
/// over every backward since the last zero_grad() (layers add to it, never overwrite it,
/// so `grad` may be a view into a larger buffer, as DDP's buckets are).
class Parameter {
 public:
  /// Called with the parameter the moment its gradient for the current backward is final.
  using GradReadyHook = std::function<void(Parameter&)>;

  /// A parameter named `name` (the local name; a parent module prefixes it) holding
  /// `value`, with a zero gradient when requires_grad.
  Parameter(std::string name, Tensor value, bool requires_grad = true);

  /// The trainable values.
  Tensor value;
  /// Same shape, dtype and device as `value`; undefined when requires_grad is false.
  Tensor grad;

  /// False for a frozen parameter: no gradient, no hooks, optimizers skip it.
  bool requires_grad() const { return requires_grad_; }
  /// Freezing drops the gradient; unfreezing allocates a zero one.
  void set_requires_grad(bool on);

  /// The dotted name from the root module, e.g. "features.0.weight". It is fixed once the
  /// module tree is built (a parent prefixes its children's names when it registers them).
  const std::string& name() const { return name_; }

  /// Registers `hook`; returns a handle for remove_grad_ready_hook().
  std::size_t add_grad_ready_hook(GradReadyHook hook);
  /// Unregisters a hook; throws for an unknown handle.
  void remove_grad_ready_hook(std::size_t handle);
  /// Number of hooks registered now.
  std::size_t num_grad_ready_hooks() const { return hooks_.size(); }

  /// Called by a layer's backward right after it has added this backward's contribution to
  /// `grad`: runs every hook in registration order. Does nothing when requires_grad is false.
  void notify_grad_ready();

  /// grad <- 0 (keeps the grad's storage, so views into it stay valid).
  void zero_grad();

 private:
  friend class Module;
  std::string name_;
  bool requires_grad_ = true;
  std::size_t next_handle_ = 0;
  std::vector<std::pair<std::size_t, GradReadyHook>> hooks_;
};

}  // namespace mgpu::nn
