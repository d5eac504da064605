/// @file expert_mlp.h
/// @brief ExpertMLP: one expert of a Mixture of Experts, the transformer's MLP on the rows
/// routed to it: fc1 = Linear(M, F), GELU (tanh form), fc2 = Linear(F, M), with biases as
/// GPT-2's MLP has (Mixtral's and DeepSeek's experts have none, and a SwiGLU).
#pragma once

#include <cstdint>

#include "mgpu/nn/layer.h"

namespace mgpu::parallel::moe {

/// Children "fc1" = Linear(M, F), "gelu", "fc2" = Linear(F, M), drawn as nn::Linear draws
/// them. rows [R, M] in, [R, M] out; R may vary from forward to forward (the rows a router
/// sends it), R = 0 included (nothing runs: the caller skips an empty expert).
class ExpertMLP : public nn::Layer<ExpertMLP> {
 public:
  /// An expert of dim M and hidden F.
  ExpertMLP(std::int64_t dim, std::int64_t hidden);
  Tensor forward(const Tensor& rows) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

 private:
  std::int64_t dim_, hidden_;
};

}  // namespace mgpu::parallel::moe
