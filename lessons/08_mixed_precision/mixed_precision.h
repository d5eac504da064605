/// @file mixed_precision.h
/// @brief Lesson 08's contract for task 4, the training step. Tasks 1-3 are functions the
/// library declares and you define (the library itself is built with the reference,
/// solutions/08_mixed_precision/):
///
///   task 1  amp::update_scale         the loss scale's state machine (PyTorch's
///           (scale_update.cpp)        _amp_update_scale_), mgpu/amp/scaling.h
///   task 2  amp::GradScaler::unscale_ the per-optimizer stages and their errors, the
///           (unscale.cpp)             inverse scale, the inf/NaN check, and the skip
///                                     decision agreed across ranks, mgpu/amp/grad_scaler.h
///   task 3  nn::Linear::forward and   16-bit GEMMs, f32 accumulation and f32 gradients for
///           backward                  the f32 weights, mgpu/nn/linear.h
///           (linear_mixed_precision.cpp)
///   task 4  train_step                one mixed-precision training step: autocast forward,
///           (train_step.cpp)          fp32 loss, scaled backward, step, update
///
/// The library (mgpu/amp/) holds the rest: the Autocast region and its weight-cast cache,
/// the mixed-precision GEMM (16-bit operands, f32 result), the fused check-and-unscale
/// kernel, and amp::GradScaler's scale(), step() and update().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mgpu/amp/autocast.h"
#include "mgpu/amp/grad_scaler.h"
#include "mgpu/nn/module.h"
#include "mgpu/nn/loss.h"
#include "mgpu/optim/optimizer.h"

namespace mgpu::lesson08 {

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
