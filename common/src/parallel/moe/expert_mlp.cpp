// One expert: the MLP of a transformer block, on the rows the router sent it.
#include "mgpu/parallel/moe/expert_mlp.h"

#include <memory>
#include <string>

#include "mgpu/nn/activation.h"
#include "mgpu/nn/linear.h"

namespace mgpu::parallel::moe {

ExpertMLP::ExpertMLP(std::int64_t dim, std::int64_t hidden) : dim_(dim), hidden_(hidden) {
  register_module("fc1", std::make_shared<nn::Linear>(dim, hidden));
  register_module("gelu", std::make_shared<nn::GELU>());
  register_module("fc2", std::make_shared<nn::Linear>(hidden, dim));
}

std::string ExpertMLP::describe() const {
  return "ExpertMLP(dim=" + std::to_string(dim_) + ", hidden=" + std::to_string(hidden_) + ")";
}

Tensor ExpertMLP::forward(const Tensor& rows) {
  MGPU_CHECK(rows.ndim() == 2 && rows.size(1) == dim_, describe(), ": rows are ", rows.str(),
             ", expected [R, ", dim_, "]");
  Tensor h = rows;
  for (std::size_t i = 0; i < 3; ++i) h = child_at(i)->forward(h);
  return h;
}

Tensor ExpertMLP::backward(const Tensor& grad_out) {
  Tensor g = grad_out;
  for (std::size_t i = 3; i-- > 0;) g = child_at(i)->backward(g);
  return g;
}

}  // namespace mgpu::parallel::moe
