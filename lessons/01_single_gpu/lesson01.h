/// @file lesson01.h
/// @brief Lesson 01's contract: the training step and the evaluation loop (task 3), and what
/// the tests and the `train` program call.
///
/// Tasks 1 and 2 are the library's: nn::Linear's forward and backward
/// (mgpu/nn/linear.h) and optim::SGD's step (mgpu/optim/sgd.h) are declared there and
/// defined by your linear.cpp and sgd.cpp; every later lesson trains with their reference.
#pragma once

#include <cstdint>

#include "mgpu/app/evaluate.h"
#include "mgpu/data/dataloader.h"
#include "mgpu/nn/linear.h"
#include "mgpu/nn/loss.h"
#include "mgpu/nn/module.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/tensor.h"

namespace mgpu::lesson01 {

// ---- Task 3: the training step and the evaluation loop (train_step.cpp) -------------------------

/// What one training step reports.
struct StepResult {
  double loss = 0;            ///< mean loss of the batch, before the update
  std::int64_t correct = 0;   ///< samples whose largest logit is at their label
  std::int64_t samples = 0;   ///< batch size
};

/// Task 3a: one step of training on one batch: clear the gradients, forward, loss,
/// backward, optimizer step. Works with any model and optimizer.
StepResult train_step(nn::Module& model, nn::CrossEntropyLoss& loss_fn, optim::Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& labels);

/// What an evaluation reports.
struct EvalResult {
  double loss = 0;        ///< mean loss over every sample
  double accuracy = 0;    ///< fraction of samples classified right, in [0, 1]
  std::int64_t samples = 0;
};

/// Task 3b: the model's mean loss and accuracy over one pass of `loader`, in evaluation
/// mode, without changing any parameter or running statistic; the model is back in
/// training mode afterwards.
EvalResult evaluate(nn::Module& model, data::DataLoader& loader);

// ---- given: what the tasks and the program use ------------------------------------------------

/// How many rows of logits [N, C] have their largest value at labels[row] (labels [N], i64):
/// the library's (mgpu/app/evaluate.h). Copies the predictions to the host (and so waits for
/// the device).
using app::count_correct;

}  // namespace mgpu::lesson01
