/// @file layer.h
/// @brief nn::Layer: the layer protocol written once. A layer derives from
/// Layer<Self, Saved> and writes only what is its own (forward, backward, describe); the
/// base gives it clone() and, when Saved is not void, the forward contexts it keeps for its
/// backward with the two hooks Module asks of them.
///
///     class ReLU : public Layer<ReLU, Tensor> {      // keeps one Tensor per forward
///      public:
///       Tensor forward(const Tensor& x) override;      // saved_.push("ReLU", x) in training
///       Tensor backward(const Tensor& grad_out) override;  // x = saved_.pop("ReLU")
///       std::string describe() const override;
///     };
///     class MLP : public Layer<MLP> { ... };           // keeps nothing itself (its children do)
///     class ColumnParallelLinear : public Layer<ColumnParallelLinear, void, Linear> { ... };
///
/// clone() is a deep copy (Module's copy constructor: parameters, buffers and children
/// copied) with nothing saved. A layer whose copy needs more (a member that must not be
/// shared) overrides clone() itself.
#pragma once

#include <cstddef>
#include <memory>

#include "mgpu/nn/module.h"

namespace mgpu::nn {

/// A layer `Self` that keeps a `Saved` per forward in training mode (see above); `Base` is
/// Module, or the layer `Self` extends.
template <typename Self, typename Saved = void, typename Base = Module>
class Layer;

/// A layer that keeps no forward context of its own: clone() only.
template <typename Self, typename Base>
class Layer<Self, void, Base> : public Base {
 public:
  /// A copy of this layer (parameters, buffers and children copied) with nothing saved.
  std::shared_ptr<Module> clone() const override {
    std::shared_ptr<Self> copy(new Self(static_cast<const Self&>(*this)));
    copy->clear_saved();
    return copy;
  }

 protected:
  using Base::Base;
  Layer() = default;
};

/// A layer that keeps one `Saved` per forward in training mode, in saved_.
template <typename Self, typename Saved, typename Base>
class Layer : public Layer<Self, void, Base> {
 protected:
  using Layer<Self, void, Base>::Layer;
  Layer() = default;
  void clear_saved_self() override { saved_.clear(); }
  std::size_t saved_self() const override { return saved_.size(); }

  /// The forward contexts, newest last, each under its ContextScope id.
  SavedContexts<Saved> saved_;
};

}  // namespace mgpu::nn
