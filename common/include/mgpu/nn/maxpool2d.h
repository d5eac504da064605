/// @file maxpool2d.h
/// @brief MaxPool2d: the largest value of each k x k window (no padding).
#pragma once

#include <cstdint>

#include "mgpu/nn/module.h"

namespace mgpu::nn {

/// x [N, C, H, W] -> [N, C, (H - k) / s + 1, (W - k) / s + 1]. Backward routes each output
/// gradient to the input element that was the maximum (the first one on ties).
class MaxPool2d : public Module {
 public:
  /// stride 0 means stride = kernel_size (PyTorch's default).
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<Module> clone() const override;
  std::string describe() const override;

 protected:
  /// Copies everything (clone() then drops the saved contexts).
  MaxPool2d(const MaxPool2d&) = default;
  void clear_saved_self() override { saved_.clear(); }
  std::size_t saved_self() const override { return saved_.size(); }

 private:
  struct Saved {
    Tensor argmax;  // i64, per output element: flat index into its input plane
    Shape input_shape;
  };
  std::int64_t kernel_, stride_;
  SavedContexts<Saved> saved_;
};

}  // namespace mgpu::nn
