/// @file mixed_precision.h
/// @brief Lesson 08's contract: the pieces of mixed-precision training you write. The
/// graded tests compile against exactly these declarations.
///
/// The library (mgpu/amp/) holds the rest: the Autocast region and its weight-cast cache,
/// the mixed-precision GEMM (16-bit operands, f32 result), the fused check-and-unscale
/// kernel, and amp::GradScaler's scale(), step() and update(). Your pieces plug into it:
///
///   task 1  update_scale             the loss scale's state machine (PyTorch's
///                                    _amp_update_scale_)
///   task 2  GradScaler::unscale_     the per-optimizer stages and their errors, the
///                                    inverse scale, the inf/NaN check, and the skip
///                                    decision agreed across ranks
///   task 3  Linear                   forward and backward with 16-bit GEMMs, f32
///                                    accumulation and f32 gradients for the f32 weights
///   task 4  train_step               one mixed-precision training step: autocast forward,
///                                    fp32 loss, scaled backward, step, update
///
/// lesson08::GradScaler is the library's GradScaler with your tasks 1 and 2; the program
/// `train` builds its model with your Linear and trains it with your train_step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mgpu/amp/autocast.h"
#include "mgpu/amp/grad_scaler.h"
#include "mgpu/nn/linear.h"
#include "mgpu/nn/loss.h"
#include "mgpu/optim/optimizer.h"

namespace mgpu::lesson08 {

// ---- Task 1: the scale's update rule (scale_update.cpp) ----------------------------------

/// Called once per iteration by GradScaler::update() with found_inf = "some gradient was
/// inf or NaN in this iteration". With PyTorch's arithmetic:
///  - found_inf: scale <- scale * backoff_factor (in double, rounded to float);
///    growth_tracker <- 0.
///  - otherwise: this is clean step number growth_tracker + 1 in a row. When that number
///    equals growth_interval, the new scale is scale * growth_factor (in double, rounded to
///    float), taken only if it is finite, and growth_tracker <- 0 (taken or not); else
///    growth_tracker <- that number.
/// Example, interval 3, from 65536 and 0: clean, clean, inf, clean, clean, clean give
/// scales 65536, 65536, 32768, 32768, 32768, 65536 and trackers 1, 2, 0, 1, 2, 0.
void update_scale(float& scale, std::int32_t& growth_tracker, bool found_inf,
                  double growth_factor, double backoff_factor, std::int64_t growth_interval);

// ---- Task 2: unscale_ and the skip decision (unscale.cpp) ---------------------------------

/// The library's GradScaler with your update rule (task 1) and your unscale_ (task 2).
class GradScaler : public amp::GradScaler {
 public:
  using amp::GradScaler::GradScaler;

  /// Task 2. Divides the optimizer's gradients by the scale and records, for step() and
  /// update(), whether any was inf or NaN - the same answer on every rank of the group the
  /// scaler was built with. What you work with (protected members of amp::GradScaler, see
  /// mgpu/amp/grad_scaler.h):
  ///   optimizer_state(opt)     this iteration's OptimizerState of opt: .stage (Stage::ready,
  ///                            unscaled, stepped) and .found_inf_per_device (device name ->
  ///                            f32 {} flag)
  ///   scale_                   the current scale (a float)
  ///   unscale_grads_(opt, inv_scale, allow_fp16)   the fused check-and-unscale over opt's
  ///                            gradients, one flag per device (throws on f16 gradients
  ///                            unless allow_fp16)
  ///   group_                   the ProcessGroup to agree over, or nullptr
  /// Rules: refuse a second unscale_ before update() and an unscale_ after step() (PyTorch's
  /// messages: "unscale_() has already been called on this optimizer since the last
  /// update()", "unscale_() is being called after step()"); the inverse is
  /// 1 / scale computed in double, then rounded to float; f16 gradients are refused; with a
  /// group, the flags become one flag, the all-reduce MAX of every rank's (on
  /// group_->device()), so every rank skips together.
  void unscale_(optim::Optimizer& optimizer) override;

 protected:
  /// Plugs task 1 in: update_scale(scale_, growth_tracker_, found_inf, ...).
  void update_scale_(bool found_inf) override;
};

// ---- Task 3: the low-precision Linear (linear.cpp) ----------------------------------------

/// nn::Linear (same parameters, initialisation and names) with your forward and backward,
/// following the library's precision policy (mgpu/amp/autocast.h):
///  - forward: compute = amp::gemm_dtype(W): the Autocast region's f16/bf16 when one is
///    open and W is f32, W's own dtype otherwise. The GEMM's operands are x and W in
///    `compute` (amp::cast_operand for x; amp::cast_weight for W, which casts it once per
///    region), its result is in W's dtype (matmul(a, b, trans_a, trans_b, out_dtype): the
///    16-bit products are summed in f32 and not rounded back to 16 bits). Then the bias, in
///    f32. In training mode keep the two 16-bit operands for backward.
///  - backward: the incoming gradient cast to the forward's compute dtype; dW = g^T x added
///    straight into the f32 weight.grad (matmul_out with beta = 1: the 16-bit products are
///    accumulated in f32, never rounded to 16 bits); db = the sum of the f32 grad_out's
///    rows; dx = g W with an f32 result. Outside a region all of this is plain f32.
class Linear : public nn::Linear {
 public:
  /// As nn::Linear.
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true)
      : nn::Linear(in_features, out_features, bias) {}
  /// Task 3: x [N, in] -> [N, out] in W's dtype.
  Tensor forward(const Tensor& x) override;
  /// Task 3: grad_out [N, out] -> grad_in [N, in]; f32 weight and bias gradients.
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<nn::Module> clone() const override;
  std::string describe() const override;

 protected:
  /// Copies everything (clone() then drops the saved contexts).
  Linear(const Linear&) = default;
  void clear_saved_self() override { saved_.clear(); }

 private:
  /// What forward keeps for backward: the GEMM's two operands as it used them.
  struct Saved {
    Tensor x;  ///< the input in the compute dtype
    Tensor w;  ///< the weight in the compute dtype
  };
  nn::SavedContexts<Saved> saved_;
};

/// Builds lesson08::Linear layers, for nn::make_model's make_linear argument.
std::shared_ptr<nn::Module> make_linear(std::int64_t in, std::int64_t out);

// ---- Task 4: the training step (train_step.cpp) -------------------------------------------

/// The three ways to train: fp32 everywhere; bf16 GEMMs (no loss scaling needed); fp16
/// GEMMs (with a GradScaler, unless --no-loss-scaling shows what goes wrong without one).
enum class Precision { fp32, bf16, fp16 };
/// "fp32", "bf16", "fp16" -> Precision; throws on anything else.
Precision parse_precision(const std::string& name);
/// The name parse_precision() reads.
const char* precision_name(Precision p);

/// What one step reports.
struct StepResult {
  double loss = 0;       ///< the mean loss of the batch (unscaled), as a host number
  bool stepped = false;  ///< false when the scaler skipped the optimizer's step
  double scale = 1;      ///< the scaler's scale after update() (1 when disabled)
  Tensor logits;         ///< the forward's output (the program counts right answers with it)
};

/// One training step of `model` on the batch (x, y):
///   Step 1) optimizer.zero_grad().
///   Step 2) forward: inside an amp::Autocast region of bf16 or f16 unless fp32.
///   Step 3) the loss in f32, outside the region.
///   Step 4) backward of the scaled loss: model.backward(scaler.scale(d loss / d logits)).
///   Step 5) scaler.step(optimizer): unscale, check for inf/NaN, step unless found.
///   Step 6) scaler.update().
/// The scaler decides whether scaling happens: a disabled scaler (bf16, fp32, or fp16 with
/// --no-loss-scaling) passes everything through.
StepResult train_step(nn::Module& model, nn::CrossEntropyLoss& loss_fn,
                      optim::Optimizer& optimizer, amp::GradScaler& scaler, const Tensor& x,
                      const Tensor& y, Precision precision);

}  // namespace mgpu::lesson08
