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

namespace detail {
/// What every Layer has: clone() of `Self`, on top of `Base`.
template <typename Self, typename Base>
class LayerClone : public Base {
 public:
  /// A copy of this layer (parameters, buffers and children copied) with nothing saved.
  std::shared_ptr<Module> clone() const override {
    std::shared_ptr<Self> copy(new Self(static_cast<const Self&>(*this)));
    copy->clear_saved();
    return copy;
  }

 protected:
  using Base::Base;
  LayerClone() = default;
};
}  // namespace detail

/// A layer `Self` that keeps one `Saved` per forward in training mode, in saved_ (see
/// above); `Base` is Module, or the layer `Self` extends.
template <typename Self, typename Saved = void, typename Base = Module>
class Layer : public detail::LayerClone<Self, Base> {
 protected:
  using detail::LayerClone<Self, Base>::LayerClone;
  Layer() = default;
  /// Drops every saved forward context (Module's hook).
  void clear_saved_self() override { saved_.clear(); }
  /// How many forward contexts are saved (Module's hook).
  std::size_t saved_self() const override { return saved_.size(); }

  /// The forward contexts, newest last, each under its ContextScope id.
  SavedContexts<Saved> saved_;
};

/// A layer that keeps no forward context of its own: clone() only.
template <typename Self, typename Base>
class Layer<Self, void, Base> : public detail::LayerClone<Self, Base> {
 protected:
  using detail::LayerClone<Self, Base>::LayerClone;
  Layer() = default;
};

}  // namespace mgpu::nn
