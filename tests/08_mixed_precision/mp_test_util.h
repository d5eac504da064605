// Helpers of lesson 08's tests: a toy layer with an SGD,
// synthetic batches, and a short training run to compare precisions.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "groups.h"
#include "mgpu/amp/all.h"
#include "mgpu/amp/train_step.h"
#include "mgpu/data/dataset.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "random_data.h"
#include "reference_models.h"

namespace mptest {

using namespace mgpu;

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

/// One nn::Linear 4 -> 3 and an SGD(lr 0.1) on it; gradients set by hand.
using Toy = testing::LinearWithSgd;

/// Uniform values in [lo, hi) from a seed.
inline Tensor random(const Shape& s, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return testing::uniform_tensor(s, seed, DType::f32, lo, hi);
}

/// Samples [begin, begin + n) of a dataset as a batch: x [n, features], y [n] (i64).
inline void batch_of(const data::Dataset& d, std::int64_t begin, std::int64_t n, Tensor& x,
                     Tensor& y) {
  const std::int64_t features = shape_numel(d.sample_shape());
  x = Tensor::empty({n, features});
  y = Tensor::empty({n}, DType::i64);
  for (std::int64_t i = 0; i < n; ++i)
    y.data<std::int64_t>()[i] = d.get(begin + i, x.data<float>() + i * features);
}

/// The synthetic 10-class task the training tests learn: 64 features, noisy prototypes.
inline std::shared_ptr<data::SyntheticDataset> synthetic(data::Split split, std::int64_t n) {
  return std::make_shared<data::SyntheticDataset>(n, Shape{64}, 10, /*seed=*/7, split,
                                                  /*noise=*/2.5f);
}

/// An MLP 64 -> 32 -> 10 built with `linear` (null: nn::Linear), from a fixed seed.
inline std::shared_ptr<nn::Sequential> small_mlp(const nn::LinearFactory& linear) {
  const nn::LinearFactory make_linear =
      linear ? linear : [](std::int64_t in, std::int64_t out) {
        return std::static_pointer_cast<nn::Module>(std::make_shared<nn::Linear>(in, out));
      };
  nn::manual_seed(3);
  auto m = std::make_shared<nn::Sequential>();
  m->add(make_linear(64, 32));
  m->add(std::make_shared<nn::ReLU>());
  m->add(make_linear(32, 10));
  return m;
}

/// Accuracy of `model` on the whole dataset (eval mode, fp32).
inline double accuracy(nn::Module& model, const data::Dataset& d) {
  Tensor x, y;
  batch_of(d, 0, d.size(), x, y);
  model.eval();
  const auto pred = argmax_last(model.forward(x)).to_vector<std::int64_t>();
  model.train();
  const auto labels = y.to_vector<std::int64_t>();
  std::int64_t right = 0;
  for (std::size_t i = 0; i < pred.size(); ++i) right += pred[i] == labels[i];
  return static_cast<double>(right) / static_cast<double>(pred.size());
}

/// What a short training run ends with.
struct RunResult {
  double last_loss = 0;    ///< mean loss of the last epoch
  double test_acc = 0;     ///< accuracy on the test split
  int skipped = 0;         ///< steps the scaler skipped
};

/// `epochs` passes over 1024 training samples in batches of 32 with SGD(lr 0.05, momentum
/// 0.9), each step made by `step` (your train_step or a reference).
template <typename Step>
RunResult train_small_mlp(nn::Sequential& model, amp::GradScaler& scaler, amp::Precision p,
                          int epochs, Step&& step) {
  auto train = synthetic(data::Split::train, 1024);
  auto test = synthetic(data::Split::test, 512);
  optim::SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  optim::SGD sgd(model.parameters(), o);
  nn::CrossEntropyLoss loss_fn;
  RunResult r;
  for (int e = 0; e < epochs; ++e) {
    double sum = 0;
    int steps = 0;
    for (std::int64_t b = 0; b < train->size(); b += 32, ++steps) {
      Tensor x, y;
      batch_of(*train, b, 32, x, y);
      const amp::StepResult s = step(model, loss_fn, sgd, scaler, x, y, p);
      sum += s.loss;
      r.skipped += s.stepped ? 0 : 1;
    }
    r.last_loss = sum / steps;
  }
  r.test_acc = accuracy(model, *test);
  return r;
}

/// A training step made of the library's pieces alone (no scaler: bf16 and f32 need none;
/// f16 is taken as bf16), for train_small_mlp: how a Linear of yours is trained.
inline amp::StepResult reference_step(nn::Module& m, nn::CrossEntropyLoss& loss,
                                      optim::Optimizer& opt, amp::GradScaler&, const Tensor& x,
                                      const Tensor& y, amp::Precision p) {
  opt.zero_grad();
  Tensor logits;
  {
    amp::Autocast region(DType::bf16, /*enabled=*/p != amp::Precision::fp32);
    logits = m.forward(x);
  }
  amp::StepResult r;
  r.loss = loss.forward(logits, y).item();
  m.backward(loss.backward());
  opt.step();
  r.stepped = true;
  return r;
}

using testing::group;

}  // namespace mptest
