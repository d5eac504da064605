/// @file models.h
/// @brief The course's two Fashion-MNIST models, defined once for every lesson and benchmark.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mgpu/nn/module.h"

namespace mgpu::nn {

/// Builds a fully connected layer; lets a lesson put its own Linear into the same model.
using LinearFactory = std::function<std::shared_ptr<Module>(std::int64_t in, std::int64_t out)>;

/// "mlp": Flatten, 784 -> 256 -> 128 -> 10 with ReLUs.
/// "cnn": two blocks of Conv2d(3x3, pad 1) + BatchNorm2d + ReLU + MaxPool2d(2)
/// (1x28x28 -> 32x14x14 -> 64x7x7), then Flatten, 3136 -> 128 -> 10.
/// Layers are built in order, so the same seed gives the same weights wherever the model
/// is built. `make_linear` (default: nn::Linear) builds the fully connected layers.
/// Throws mgpu::Error for any other name.
std::shared_ptr<Sequential> fashion_mnist_model(const std::string& name,
                                                const LinearFactory& make_linear = nullptr);

}  // namespace mgpu::nn
