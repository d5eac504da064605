// Task 3: one training step, and the evaluation loop.
#include "lesson01.h"
#include "mgpu/ops.h"

namespace mgpu::lesson01 {

StepResult train_step(nn::Module& model, nn::CrossEntropyLoss& loss_fn, optim::Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& labels) {
  // What you have: optimizer.zero_grad() and step(); model.forward and backward;
  // loss_fn.forward(logits, labels) -> the batch's mean loss (0-d), loss_fn.backward() -> its
  // gradient with respect to the logits; Tensor::item(); count_correct(logits, labels).
  // TODO(task3) BEGIN: one training step on this batch (chapter §1): afterwards the weights
  // have moved once, by this batch's gradient alone (backward ADDS to the gradients). Returns
  // {the mean loss, the correct predictions, the batch size}. (about 10 lines)
  (void)loss_fn;
  MGPU_FAIL("TODO(task3): train_step is not written yet (lessons/01_single_gpu/train_step.cpp); "
            "model ", model.describe(), ", optimizer ", optimizer.describe(), ", inputs ",
            inputs.str(), ", labels ", labels.str());
  // TODO(task3) END
}

EvalResult evaluate(nn::Module& model, data::DataLoader& loader) {
  // What you have: model.eval() and train(); loader.start_epoch(e), then loader.next(batch)
  // until it returns false; nn::CrossEntropyLoss; count_correct(logits, labels); item().
  // TODO(task3) BEGIN: the mean loss and the accuracy over one pass of the loader in
  // evaluation mode, the model back in training mode afterwards. Batches may differ in size
  // (the last one): the mean is over samples, not over batches. Returns {loss, accuracy (a
  // fraction), samples}. (about 15 lines)
  MGPU_FAIL("TODO(task3): evaluate is not written yet (lessons/01_single_gpu/train_step.cpp); "
            "model ", model.describe(), ", data ", loader.dataset().describe());
  // TODO(task3) END
}

}  // namespace mgpu::lesson01
