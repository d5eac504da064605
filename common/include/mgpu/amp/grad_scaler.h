/// @file grad_scaler.h
/// @brief GradScaler: dynamic loss scaling for fp16 training (torch.amp.GradScaler).
///
/// fp16 cannot hold values below 2^-24: small gradients become 0. Multiplying the loss by
/// a large scale S moves every gradient up by S, into fp16's range; the optimizer must then
/// see gradient / S, and a step whose scaled gradients overflowed (inf or NaN) must be
/// skipped. GradScaler does both and adapts S: halve it after an overflow, double it after
/// growth_interval clean steps in a row.
///
///     amp::GradScaler scaler;                          // init_scale 2^16, interval 2000
///     ...
///     model.backward(scaler.scale(loss_fn.backward())); // = backward of S * loss
///     scaler.step(optimizer);      // unscale_, check for inf/NaN, step unless found
///     scaler.update();             // adapt S for the next iteration
///
/// Layer-wise backward: scaling the loss by S scales the gradient that starts backward by
/// S, so scale() is applied to that gradient (or to the loss, for printing).
///
/// Across ranks: the skip decision must be the same everywhere, or the replicas drift
/// apart. Gradients averaged by DDP are identical on every rank (an inf on one rank is inf
/// or NaN on all after the all-reduce), so the local check already agrees. Gradients that
/// are not reduced (under no_sync, sharded or model-parallel parameters) need the explicit
/// agreement: give the constructor a ProcessGroup and unscale_ all-reduces found_inf with
/// MAX (as PyTorch's ShardedGradScaler does with its process group).
///
/// Where we differ from PyTorch: the scale and the growth tracker live on the host (PyTorch
/// keeps them on the GPU); step() reads found_inf on the host in both, so the number of
/// waits for the GPU is the same (one per step). Errors are mgpu::Error, not assertions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "mgpu/dist/process_group.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/tensor.h"

namespace mgpu::amp {

/// GradScaler's constructor arguments, with PyTorch's defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;        ///< 2^16, the scale of the first iteration
  double growth_factor = 2.0;         ///< scale *= growth_factor after growth_interval clean steps
  double backoff_factor = 0.5;        ///< scale *= backoff_factor after a step with inf/NaN
  std::int64_t growth_interval = 2000;  ///< clean steps in a row before the scale grows
  bool enabled = true;  ///< false: scale() and unscale_() do nothing, step() always steps
};

/// The state of a GradScaler as PyTorch's state_dict() has it: five numbers by name,
/// "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" (every
/// value is exact as a double). Empty for a disabled scaler. A checkpoint stores these as
/// scalars of its "extra state".
using ScalerState = std::map<std::string, double>;

/// Dynamic loss scaling with PyTorch's semantics: see the file comment.
class GradScaler {
 public:
  /// A scaler with `options`; with `agree_across` (not owned; must outlive the scaler), every
  /// rank of that group makes the same skip decision. Throws unless growth_factor > 1 and
  /// backoff_factor < 1 (PyTorch's checks).
  explicit GradScaler(GradScalerOptions options = {}, dist::ProcessGroup* agree_across = nullptr);
  virtual ~GradScaler() = default;
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  /// outputs * scale (same dtype and device). The first call sets the scale to init_scale
  /// (PyTorch's lazy initialization); returns `outputs` unchanged when disabled.
  Tensor scale(const Tensor& outputs);
  /// Divides the optimizer's gradients by the scale in place (multiplies by
  /// inverse_scale(scale)) and records whether any was inf or NaN. Optional: step() calls
  /// it when it has not run; call it yourself to clip or inspect real gradients first.
  /// Throws when called twice before update(), after step(), before the first scale(), or
  /// when a gradient is f16 (the parameters must be fp32 master weights). With a group,
  /// the flags become one, the all-reduce MAX of every rank's. Lesson 08's task 2 defines
  /// it (the library is built with solutions/08_mixed_precision/unscale.cpp).
  void unscale_(optim::Optimizer& optimizer);
  /// unscale_ (if not done yet), then optimizer.step() unless an inf/NaN was found.
  /// Returns true when the optimizer stepped, false when the step was skipped.
  /// Throws when called twice before update() or before the first scale().
  bool step(optim::Optimizer& optimizer);
  /// Adapts the scale from this iteration's checks (update_scale in scaling.h, over the sum
  /// of every optimizer's found_inf) and forgets them, ready for the next iteration.
  /// Throws before the first scale() or when no check was recorded (no unscale_/step).
  void update();
  /// Sets the scale to `new_scale` (rounded to float) instead; the tracker is unchanged.
  void update(double new_scale);

  /// The current scale (init_scale before the first scale(); 1 when disabled).
  double get_scale() const;
  /// Clean steps in a row since the last change of the scale (0 when disabled).
  std::int32_t growth_tracker() const;
  /// True when the most recent step() skipped the optimizer's step (for metrics).
  bool last_step_skipped() const { return last_step_skipped_; }
  /// Whether scaling is on.
  bool is_enabled() const { return options_.enabled; }
  /// growth_factor.
  double get_growth_factor() const { return options_.growth_factor; }
  /// Sets growth_factor.
  void set_growth_factor(double f) { options_.growth_factor = f; }
  /// backoff_factor.
  double get_backoff_factor() const { return options_.backoff_factor; }
  /// Sets backoff_factor.
  void set_backoff_factor(double f) { options_.backoff_factor = f; }
  /// growth_interval.
  std::int64_t get_growth_interval() const { return options_.growth_interval; }
  /// Sets growth_interval.
  void set_growth_interval(std::int64_t n) { options_.growth_interval = n; }
  /// The group the skip decision is agreed over (null: this rank alone).
  dist::ProcessGroup* process_group() const { return group_; }

  /// The five numbers of ScalerState (empty when disabled). Call it after update().
  ScalerState state_dict() const;
  /// Restores a state_dict(). Does nothing when disabled; throws when `state` is empty
  /// (saved from a disabled scaler) or lacks one of the five keys.
  void load_state_dict(const ScalerState& state);

 protected:
  /// Where an optimizer is in the iteration: no check yet, unscaled, stepped.
  enum class Stage { ready, unscaled, stepped };
  /// What the scaler knows about one optimizer in this iteration.
  struct OptimizerState {
    Stage stage = Stage::ready;  ///< see Stage
    /// One f32 {} flag per device holding gradients (keyed by Device::str()): 1 if an
    /// inf/NaN was found there. Empty until unscale_ ran.
    std::map<std::string, Tensor> found_inf_per_device;
  };

  /// The state of `optimizer` in this iteration (created on first use).
  OptimizerState& optimizer_state(const optim::Optimizer& optimizer);
  /// Throws "Attempted <funcname> but the scale is not initialized..." before the first
  /// scale() (PyTorch's _check_scale_growth_tracker).
  void check_scale_initialized(const char* funcname) const;
  /// The check of unscale_ over the optimizer's gradients: groups them by device, zeroes one
  /// found_inf per device and runs non_finite_check_and_unscale_ on each group. Throws on
  /// an f16 gradient unless allow_fp16. Skips parameters without a gradient.
  std::map<std::string, Tensor> unscale_grads_(optim::Optimizer& optimizer, float inv_scale,
                                               bool allow_fp16);
  /// The update rule, called by update(): amp::update_scale on scale_ and growth_tracker_.
  void update_scale_(bool found_inf);

  GradScalerOptions options_;            ///< the hyper-parameters (factors, interval)
  dist::ProcessGroup* group_ = nullptr;  ///< agree across these ranks (null: no agreement)
  bool initialized_ = false;             ///< false until the first scale()
  float scale_ = 0.f;                    ///< the loss scale S (valid once initialized_)
  std::int32_t growth_tracker_ = 0;      ///< clean steps in a row
  double init_scale_ = 65536.0;          ///< get_scale() before, and scale_ at, lazy initialization
  std::int32_t init_growth_tracker_ = 0; ///< growth_tracker_ at lazy initialization
  bool last_step_skipped_ = false;       ///< see last_step_skipped()
  /// Per optimizer (by address), for the current iteration; cleared by update().
  std::map<const optim::Optimizer*, OptimizerState> states_;
};

}  // namespace mgpu::amp
