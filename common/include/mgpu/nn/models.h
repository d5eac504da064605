/// @file models.h
/// @brief The course's models, named once: what every program's `--model NAME` builds.
///
///   name       layers (for 1x28x28 images and 10 classes)                       used by
///   mlp        Flatten, 784-256-128-10, ReLU between                            01, 05
///   mlp-bn     mlp with BatchNorm1d after the first Linear                      02
///   deep-mlp   Flatten, 784-512-512-256-256-10, ReLU between (splits 4 ways)    03
///   cnn        2 x [Conv2d 3x3 (32, 64 channels), BatchNorm2d, ReLU, MaxPool2d 2],
///              Flatten, 3136-128-10                                             01, 05
///   cnn-small  2 x [Conv2d 3x3 (16, 32 channels), BatchNorm2d, ReLU, MaxPool2d 2],
///              Flatten, 1568-10                                                 02
///   wide-mlp   Flatten, 784-1024x9-10, ReLU between (35 MiB of gradients: several
///              DDP buckets at the default cap)                                  09
///
/// A program accepts the names that make sense for it; `--help` lists them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/nn/module.h"
#include "mgpu/tensor.h"

namespace mgpu::nn {

/// Builds a fully connected layer; lets a lesson put its own Linear into the same model.
using LinearFactory = std::function<std::shared_ptr<Module>(std::int64_t in, std::int64_t out)>;

/// One entry of the catalogue above.
struct ModelInfo {
  const char* name;     ///< the --model name
  const char* summary;  ///< its layers in a few words
};

/// Every model make_model() knows, in the order of the table above.
const std::vector<ModelInfo>& model_catalog();

/// The one-line summary of `name` ("784-256-128-10 MLP"); throws for an unknown name.
std::string model_summary(const std::string& name);

/// Builds model `name` for samples of `sample_shape` ([C, H, W]; the CNNs need H and W
/// divisible by 4) and `num_classes` classes. Layers are built in order, so the same seed
/// (nn::manual_seed) gives the same weights wherever the model is built. `make_linear`
/// (default: nn::Linear) builds the fully connected layers. Throws mgpu::Error for an
/// unknown name or a sample shape the model cannot take.
std::shared_ptr<Sequential> make_model(const std::string& name,
                                       const Shape& sample_shape = {1, 28, 28},
                                       std::int64_t num_classes = 10,
                                       const LinearFactory& make_linear = nullptr);

}  // namespace mgpu::nn
