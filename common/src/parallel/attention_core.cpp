// The local attention core: lesson 12's causal attention over the positions a rank holds.
#include "mgpu/parallel/attention_core.h"

namespace mgpu::parallel {

Tensor LocalAttentionCore::forward(const Tensor& q, const Tensor& k, const Tensor& v, bool training) {
  Tensor probs;
  Tensor y = nn::causal_attention(q, k, v, training ? &probs : nullptr);
  if (training) saved_.push(describe(), Saved{q, k, v, probs});
  return y;
}

nn::AttentionGrads LocalAttentionCore::backward(const Tensor& grad_y) {
  const Saved s = saved_.pop(describe());
  return nn::causal_attention_backward(grad_y, s.q, s.k, s.v, s.probs);
}

std::shared_ptr<AttentionCore> LocalAttentionCore::clone() const {
  return std::make_shared<LocalAttentionCore>();
}

}  // namespace mgpu::parallel
