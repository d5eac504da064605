// Task 3: activation recomputation. A block under RecomputePolicy::full keeps only its
// input and runs its forward a second time, just before its backward; attention under
// RecomputePolicy::attn keeps q, k and v and computes its [B·n_head, T, T] probabilities
// again in backward. The results are the same bits as with everything kept.
#include "mgpu/nn/gpt.h"

namespace mgpu::nn {

Tensor Block::forward_full(const Tensor& x) {
  // What you have: x (the block's input, [B, T, C]). The block's members: children() (each
  // child's local name and its std::shared_ptr<Module>); forward_plain(x) (both residual
  // branches; each child keeps its context when it is in training mode); keep_input(x)
  // (keeps x, and the autocast region it ran in, for forward_kept()). Any Module's:
  // eval(); is_training(); saved_forwards(); train(on = true) (each sets the module and
  // all its children; a child in eval mode keeps nothing; a Block's children compute the
  // same either way).
  // TODO(task3) BEGIN: chapter §5, task 3, full: the block's output, the same bits as
  // forward_plain(x) gives, while no child keeps anything for backward (every child's
  // saved_forwards() is what it was before); the block keeps x instead, one per forward,
  // and leaves every child in training mode, even when a child throws. Stuck:
  // tools/hint 12 3 (about 8 lines).
  // The forward as PyTorch's checkpoint runs it under no_grad: the children keep nothing.
  for (const auto& child : children()) child.second->eval();
  Tensor y;
  try {
    y = forward_plain(x);
  } catch (...) {
    for (const auto& child : children()) child.second->train();
    throw;
  }
  for (const auto& child : children()) child.second->train();
  keep_input(x);
  return y;
  // TODO(task3) END
}

Tensor Block::backward_full(const Tensor& grad_out) {
  // What you have: grad_out (dL/d(output), [B, T, C]). The block's members:
  // backward_plain(grad_out) (the children's backward, from their contexts, newest first);
  // forward_kept() (takes back the newest input keep_input() kept and runs forward_plain on
  // it again, in its autocast region: in training mode every child keeps its context);
  // forward_plain(x); keep_input(x).
  // TODO(task3) BEGIN: chapter §5, task 3, full: dL/dx and every parameter gradient of the
  // block, the same bits as without recomputation; nothing of this forward stays kept
  // when it returns. Stuck: tools/hint 12 3 (about 2 lines).
  // The forward again, this time keeping every context, and at once its backward.
  forward_kept();
  return backward_plain(grad_out);
  // TODO(task3) END
}

AttentionGrads CausalSelfAttention::backward_selective(const Tensor& grad_y, const Saved& s) {
  // What you have: grad_y (dL/dy of the attention core, [BH, T, D]); s.q, s.k, s.v (what
  // the forward kept; s.probs is undefined under attn); causal_attention(q, k, v, &probs)
  // (task 1); causal_attention_backward(grad_y, q, k, v, probs) (task 2).
  // TODO(task3) BEGIN: chapter §5, task 3, attn (selective recomputation): the gradients
  // of q, k and v, the same bits as when the forward kept its probabilities; the
  // probabilities live only while this function runs. Stuck: tools/hint 12 3
  // (about 3 lines).
  Tensor probs;
  causal_attention(s.q, s.k, s.v, &probs);  // the same operations on the same values
  return causal_attention_backward(grad_y, s.q, s.k, s.v, probs);
  // TODO(task3) END
}

}  // namespace mgpu::nn
