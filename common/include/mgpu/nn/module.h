/// @file module.h
/// @brief Module: the base of every layer and model (layer-wise forward and backward).
///
/// There is no general autograd. A module's forward() keeps what its backward() will need;
/// backward() takes d(loss)/d(output), adds d(loss)/d(parameter) to each parameter's
/// `grad`, fires that parameter's grad-ready hooks, and returns d(loss)/d(input).
/// Parameters and buffers have dotted names ("0.weight", "features.3.running_mean") that
/// stay fixed, for state dicts and checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/nn/parameter.h"
#include "mgpu/tensor.h"

namespace mgpu::nn {

/// The base of every layer and model: see the file comment.
class Module {
 public:
  virtual ~Module() = default;
  Module& operator=(const Module&) = delete;

  /// Output for input `x`. In training mode the module remembers what backward needs.
  virtual Tensor forward(const Tensor& x) = 0;
  /// d(loss)/d(input) from d(loss)/d(output) of the most recent forward not yet
  /// backpropagated (last in, first out: a pipeline may run several micro-batches forward
  /// before it runs their backwards in reverse order). Adds parameter gradients.
  virtual Tensor backward(const Tensor& grad_out) = 0;
  /// A deep copy: new parameters (values and grads copied, no hooks), buffers and children.
  virtual std::shared_ptr<Module> clone() const = 0;
  /// One line, e.g. "Linear(in=784, out=256, bias=true)".
  virtual std::string describe() const = 0;

  /// Every parameter of this module and its children, depth first, own ones first
  /// (PyTorch's order), with its dotted name.
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  /// The same parameters without their names.
  std::vector<Parameter*> parameters();
  /// Every buffer (running statistics and counters: state that is not trained).
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  /// The parameter or buffer with this dotted name; throws listing the names if none.
  Parameter& parameter(const std::string& dotted_name);
  /// The buffer with this dotted name; throws listing the names if none.
  Tensor& buffer(const std::string& dotted_name);
  /// Children in registration order, with their local names.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }
  /// Swaps the child registered as `local_name` for `child` (e.g. BatchNorm -> SyncBatchNorm
  /// in lesson 06); the new child's parameters take the old one's dotted names. Throws when
  /// there is no such child.
  void replace_child(const std::string& local_name, std::shared_ptr<Module> child);
  /// Total number of parameter elements.
  std::int64_t num_parameters();

  /// Training mode (the default) or evaluation mode, for this module and its children.
  /// Dropout and BatchNorm behave differently; in eval mode forward keeps nothing.
  void train(bool on = true);
  /// Evaluation mode: train(false).
  void eval() { train(false); }
  /// True in training mode.
  bool is_training() const { return training_; }

  /// Moves parameters, gradients and buffers to `device` (and forgets saved activations).
  Module& to(const Device& device);
  /// Converts floating parameters, gradients and buffers to `dtype` (f64 for grad checks).
  Module& to(DType dtype);
  /// The device of the parameters (cpu:0 for a module that has none and was never moved).
  const Device& device() const { return device_; }
  /// The dtype of the floating parameters (f32 unless converted with to(DType)).
  DType dtype() const { return dtype_; }

  /// grad <- 0 for every parameter.
  void zero_grad();
  /// Drops every saved forward context (after an aborted step, before changing modes).
  void clear_saved();

  /// A multi-line tree of describe() lines with the children's names.
  std::string summary(int indent = 0) const;

 protected:
  Module() = default;
  /// Deep copy for clone(): parameters and buffers cloned, children cloned, hooks dropped.
  Module(const Module& other);

  /// Registers a parameter under `name` and returns its index for parameter_at().
  std::size_t register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  /// Registers a buffer (state that is not trained) and returns its index for buffer_at().
  std::size_t register_buffer(const std::string& name, Tensor value);
  /// Adds a child; its parameters' names get the prefix "name.".
  void register_module(const std::string& name, std::shared_ptr<Module> child);

  /// This module's own parameter number i (registration order). Layers keep indices, not
  /// pointers, so that a clone refers to its own parameters.
  Parameter& parameter_at(std::size_t i) { return *params_.at(i).second; }
  /// This module's own buffer number i.
  Tensor& buffer_at(std::size_t i) { return buffers_.at(i).second; }
  /// Child number i.
  std::shared_ptr<Module>& child_at(std::size_t i) { return children_.at(i).second; }
  /// Number of children.
  std::size_t num_children() const { return children_.size(); }

  /// Hook for layers that keep forward contexts: drop them.
  virtual void clear_saved_self() {}

 private:
  void collect_parameters(const std::string& prefix,
                          std::vector<std::pair<std::string, Parameter*>>& out);
  void collect_buffers(const std::string& prefix,
                       std::vector<std::pair<std::string, Tensor*>>& out);
  void prefix_names(const std::string& prefix);

  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> params_;  // local names
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::string path_;  // dotted path from the root ("" for the root), kept by prefix_names
  bool training_ = true;
  Device device_ = Device::cpu();
  DType dtype_ = DType::f32;
};

/// The forward contexts a layer keeps for its backward, last in, first out.
/// A cap catches the classic leak: forwards in training mode that never get a backward
/// (evaluating without eval()).
template <typename Ctx>
class SavedContexts {
 public:
  /// More saved forwards than this is a bug in the caller, not a deep pipeline.
  static constexpr std::size_t kMaxSaved = 256;

  /// Saves the context of a forward of `layer` (named in the error messages).
  void push(const std::string& layer, Ctx ctx) {
    MGPU_CHECK(stack_.size() < kMaxSaved, layer, ": ", kMaxSaved,
               " forwards in training mode without a backward; call model.eval() before "
               "evaluating, or clear_saved() after a forward you will not backpropagate");
    stack_.push_back(std::move(ctx));
  }
  /// Takes back the most recent context; throws when there is none.
  Ctx pop(const std::string& layer) {
    MGPU_CHECK(!stack_.empty(), layer,
               ": backward called without a matching forward in training mode (forward in "
               "eval mode keeps nothing; call model.train() before a training forward)");
    Ctx c = std::move(stack_.back());
    stack_.pop_back();
    return c;
  }
  /// Drops every saved context.
  void clear() { stack_.clear(); }
  /// Number of saved contexts.
  std::size_t size() const { return stack_.size(); }

 private:
  std::vector<Ctx> stack_;
};

/// Runs children one after another; backward runs them in reverse.
class Sequential : public Module {
 public:
  /// An empty Sequential; add() layers.
  Sequential() = default;
  /// The layers in order, named "0", "1", ...
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  /// Appends a layer named by its position ("0", "1", ...).
  Sequential& add(std::shared_ptr<Module> layer);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<Module> clone() const override;
  std::string describe() const override { return "Sequential"; }

  /// Number of layers.
  std::size_t size() const { return num_children(); }
  /// Layer i.
  Module& operator[](std::size_t i) { return *child_at(i); }
  /// Layer i, shared.
  std::shared_ptr<Module> at(std::size_t i) { return child_at(i); }

 protected:
  /// Copies everything (clone() deep-copies the children through Module's copy).
  Sequential(const Sequential& other) = default;
};

}  // namespace mgpu::nn
