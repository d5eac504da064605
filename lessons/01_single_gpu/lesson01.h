/// @file lesson01.h
/// @brief Lesson 01's contract: what you write (Linear, SGD, the training step and the
/// evaluation loop) and what the tests and the `train` program call.
///
/// The library has its own reference versions (mgpu::nn::Linear, mgpu::optim::SGD); later
/// lessons use those, so this lesson's code only has to be right for this lesson.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/data/dataloader.h"
#include "mgpu/nn/loss.h"
#include "mgpu/nn/module.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/tensor.h"

namespace mgpu::lesson01 {

// ---- Task 1: the fully connected layer (linear.cpp) ------------------------------------------

/// y = x W^T + b for a batch x [N, in]; W is [out, in], b is [out].
class Linear : public nn::Module {
 public:
  /// Weights and bias drawn from U(-1/sqrt(in), 1/sqrt(in)), PyTorch's default.
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);

  /// Task 1a: x [N, in] -> y [N, out]; in training mode remember x for backward.
  Tensor forward(const Tensor& x) override;
  /// Task 1b: from dL/dy [N, out]: add dL/dW and dL/db to the parameters' `grad`, tell each
  /// parameter its gradient is ready, return dL/dx [N, in].
  Tensor backward(const Tensor& grad_out) override;

  std::shared_ptr<nn::Module> clone() const override;
  std::string describe() const override;

  nn::Parameter& weight() { return parameter_at(weight_); }
  /// Throws when the layer was built without a bias.
  nn::Parameter& bias();
  bool has_bias() const { return has_bias_; }

 protected:
  Linear(const Linear&) = default;
  void clear_saved_self() override { saved_inputs_.clear(); }

 private:
  std::int64_t in_, out_;
  bool has_bias_;
  std::size_t weight_ = 0, bias_ = 0;
  nn::SavedContexts<Tensor> saved_inputs_;  // the x of each training forward
};

// ---- Task 2: stochastic gradient descent with momentum (sgd.cpp) -------------------------------

/// torch.optim.SGD's rule (dampening 0, no Nesterov), for each parameter p with gradient g:
///   d   = g + weight_decay * p
///   buf = d                       on the first step (the momentum buffer starts as d)
///   buf = momentum * buf + d      on later steps
///   p   = p - lr * buf            (p - lr * d when momentum is 0: no buffer at all)
/// Parameters that do not require a gradient (frozen) are left alone.
class SGD : public optim::Optimizer {
 public:
  SGD(std::vector<nn::Parameter*> params, double lr, double momentum = 0.0,
      double weight_decay = 0.0);
  /// Task 2.
  void step() override;
  std::string describe() const override;
  double momentum() const { return momentum_; }
  double weight_decay() const { return weight_decay_; }

 protected:
  std::vector<std::string> state_keys() const override { return {"momentum_buffer"}; }

 private:
  double momentum_, weight_decay_;
};

// ---- Task 3: the training step and the evaluation loop (train_step.cpp) -------------------------

/// What one training step reports.
struct StepResult {
  double loss = 0;            ///< mean loss of the batch, before the update
  std::int64_t correct = 0;   ///< samples whose largest logit is at their label
  std::int64_t samples = 0;   ///< batch size
};

/// Task 3a: one step of training on one batch: clear the gradients, forward, loss,
/// backward, optimizer step. Works with any model and optimizer (the tests also pass the
/// library's reference ones).
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

// ---- given: helpers the tasks and the program use (lesson01.cpp) ------------------------------

/// How many rows of logits [N, C] have their largest value at labels[row] (labels [N], i64).
/// Copies the predictions to the host (and so waits for the device).
std::int64_t count_correct(const Tensor& logits, const Tensor& labels);

/// The course's models (nn::make_model, mgpu/nn/models.h) for 1x28x28 images and 10
/// classes, built from this lesson's Linear, e.g.
///   "mlp": Flatten, Linear(784, 256), ReLU, Linear(256, 128), ReLU, Linear(128, 10)
///   "cnn": [Conv2d(1, 32, 3, pad 1), BatchNorm2d, ReLU, MaxPool2d(2)],
///          [Conv2d(32, 64, 3, pad 1), BatchNorm2d, ReLU, MaxPool2d(2)],
///          Flatten, Linear(3136, 128), ReLU, Linear(128, 10)
/// Throws for an unknown name. Initial weights depend only on nn::manual_seed's seed.
std::shared_ptr<nn::Sequential> make_model(const std::string& name);

}  // namespace mgpu::lesson01
