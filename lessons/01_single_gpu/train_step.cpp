// Task 3: one training step, and the evaluation loop.
#include "lesson01.h"
#include "mgpu/ops.h"

namespace mgpu::lesson01 {

StepResult train_step(nn::Module& model, nn::CrossEntropyLoss& loss_fn, optim::Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& labels) {
  // TODO(task3) BEGIN: the five steps of training, in order:
  //   1) optimizer.zero_grad()  (backward ADDS to the gradients)
  //   2) logits = model.forward(inputs)
  //   3) loss = loss_fn.forward(logits, labels)
  //   4) model.backward(loss_fn.backward())
  //   5) optimizer.step()
  // and return {loss.item(), count_correct(logits, labels), batch size}. (about 10 lines)
  (void)loss_fn;
  MGPU_FAIL("TODO(task3): train_step is not written yet (lessons/01_single_gpu/train_step.cpp); "
            "model ", model.describe(), ", optimizer ", optimizer.describe(), ", inputs ",
            inputs.str(), ", labels ", labels.str());
  // TODO(task3) END
}

EvalResult evaluate(nn::Module& model, data::DataLoader& loader) {
  // TODO(task3) BEGIN: model.eval(); go through one epoch of the loader
  // (loader.start_epoch(0), then while (loader.next(batch))): forward, the batch's mean loss
  // (an nn::CrossEntropyLoss) and count_correct. Batches can differ in size (the last one),
  // so weight each batch's mean loss by its size. model.train() at the end.
  // Return the mean loss, the accuracy (a fraction) and the number of samples. (about 15 lines)
  MGPU_FAIL("TODO(task3): evaluate is not written yet (lessons/01_single_gpu/train_step.cpp); "
            "model ", model.describe(), ", data ", loader.dataset().describe());
  // TODO(task3) END
}

}  // namespace mgpu::lesson01
