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
  /// backpropagated (last in, first out), or of the most recent one saved under the same
  /// ContextScope id (a pipeline names each micro-batch's contexts and backpropagates them
  /// in the order its schedule wants). Adds parameter gradients.
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

  /// Whether backward() returns d(loss)/d(input) (true, the default). False says that the
  /// input is data nothing differentiates: as PyTorch's autograd skips the gradient of an
  /// input that does not require grad, the layers then skip that work (Linear and Conv2d a
  /// matrix product) and backward() returns an undefined Tensor. A Sequential passes it on
  /// to its layers up to and including the first one with parameters (the later layers'
  /// inputs depend on parameters). Parameter gradients are the same either way.
  virtual void set_input_requires_grad(bool on) { input_requires_grad_ = on; }
  /// See set_input_requires_grad().
  bool input_requires_grad() const { return input_requires_grad_; }

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
  /// The most saved forward contexts that one layer of this module holds now: the forwards
  /// run in training mode and not yet backpropagated (a pipeline stage's live micro-batches).
  std::size_t saved_forwards() const;

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
  /// Hook for layers that keep forward contexts: how many they hold.
  virtual std::size_t saved_self() const { return 0; }

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
  bool input_requires_grad_ = true;
  Device device_ = Device::cpu();
  DType dtype_ = DType::f32;
};

/// Names the micro-batch whose forward contexts this thread saves and takes back. While a
/// ContextScope(id) lives, every layer's forward in training mode saves its context under
/// `id` and every backward takes the newest context saved under `id`. A pipeline runs
/// micro-batch m's forward and its backward each inside ContextScope(m), so it may
/// backpropagate its micro-batches in any order (1F1B), not only in the reverse order of
/// their forwards. Outside every scope the id is kNone: plain last in, first out. Scopes
/// nest; the innermost one names the contexts.
class ContextScope {
 public:
  /// The id outside every scope.
  static constexpr std::int64_t kNone = -1;
  /// Saves and takes contexts under `id` on this thread until the scope ends.
  explicit ContextScope(std::int64_t id);
  /// Restores the id of the enclosing scope.
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  /// The id this thread saves and takes contexts under now.
  static std::int64_t current();

 private:
  std::int64_t previous_;
};

/// The forward contexts a layer keeps for its backward, each under the ContextScope id it
/// was saved in; a backward takes the newest one of the current id (last in, first out
/// when no scope is used). A cap catches the classic leak: forwards in training mode that
/// never get a backward (evaluating without eval()).
template <typename Ctx>
class SavedContexts {
 public:
  /// More saved forwards than this is a bug in the caller, not a deep pipeline.
  static constexpr std::size_t kMaxSaved = 256;

  /// Saves the context of a forward of `layer` (named in the error messages) under the
  /// current ContextScope id.
  void push(const std::string& layer, Ctx ctx) {
    MGPU_CHECK(entries_.size() < kMaxSaved, layer, ": ", kMaxSaved,
               " forwards in training mode without a backward; call model.eval() before "
               "evaluating, or clear_saved() after a forward you will not backpropagate");
    entries_.emplace_back(ContextScope::current(), std::move(ctx));
  }
  /// Takes back the newest context saved under the current ContextScope id; throws when
  /// there is none.
  Ctx pop(const std::string& layer) {
    MGPU_CHECK(!entries_.empty(), layer,
               ": backward called without a matching forward in training mode (forward in "
               "eval mode keeps nothing; call model.train() before a training forward)");
    const std::int64_t id = ContextScope::current();
    for (auto it = entries_.end(); it != entries_.begin();) {
      --it;
      if (it->first != id) continue;
      Ctx c = std::move(it->second);
      entries_.erase(it);
      return c;
    }
    auto name = [](std::int64_t i) {
      return i == ContextScope::kNone ? std::string("no ContextScope")
                                      : "ContextScope(" + std::to_string(i) + ")";
    };
    MGPU_FAIL(layer, ": backward in ", name(id), " but its forwards were saved in ",
              name(entries_.back().first), "; run a micro-batch's forward and backward in "
              "ContextScopes of the same id");
  }
  /// Drops every saved context.
  void clear() { entries_.clear(); }
  /// Number of saved contexts, of every id.
  std::size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::int64_t, Ctx>> entries_;  // (ContextScope id, context), oldest first
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
  /// Sets it on the layers up to the first one with parameters (see Module); call it once
  /// the layers are added.
  void set_input_requires_grad(bool on) override;

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
