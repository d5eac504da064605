// CrossEntropyLoss on top of the fused softmax-cross-entropy op.
#include "mgpu/nn/loss.h"

#include "mgpu/ops.h"

namespace mgpu::nn {

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& labels) {
  check_defined("CrossEntropyLoss", logits, "logits");
  check_defined("CrossEntropyLoss", labels, "labels");
  MGPU_CHECK(logits.ndim() == 2 && labels.ndim() == 1 && labels.size(0) == logits.size(0),
             "CrossEntropyLoss: logits ", logits.str(), " and labels ", labels.str(),
             " do not match: expected logits [N, classes] and labels [N]");
  Tensor probs;
  Tensor loss = softmax_cross_entropy(logits, labels, &probs);
  probs_ = probs;
  labels_ = labels;
  return loss;
}

Tensor CrossEntropyLoss::backward(double grad_scale) const {
  MGPU_CHECK(probs_.defined(), "CrossEntropyLoss::backward: call forward first");
  return softmax_cross_entropy_backward(probs_, labels_, grad_scale);
}

}  // namespace mgpu::nn
