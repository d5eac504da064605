/// @file train_step.h
/// @brief One mixed-precision training step: autocast forward, fp32 loss, scaled backward,
/// the scaler's step and update. Lesson 08's task 4 defines train_step
/// (train_step_mixed_precision.cpp); the library is built with its reference
/// (solutions/08_mixed_precision/).
#pragma once

#include <string>

#include "mgpu/amp/grad_scaler.h"
#include "mgpu/nn/loss.h"
#include "mgpu/nn/module.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/tensor.h"

namespace mgpu::amp {

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
                      optim::Optimizer& optimizer, GradScaler& scaler, const Tensor& x,
                      const Tensor& y, Precision precision);

}  // namespace mgpu::amp
