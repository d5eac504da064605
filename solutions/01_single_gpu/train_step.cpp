// Task 3: one training step, and the evaluation loop.
#include "lesson01.h"
#include "mgpu/ops.h"

namespace mgpu::lesson01 {

StepResult train_step(nn::Module& model, nn::CrossEntropyLoss& loss_fn, optim::Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& labels) {
  // What you have: count_correct(logits, labels); loss_fn.backward() -> the gradient of the
  // last loss with respect to the logits; loss_fn.forward(logits, labels) -> the batch's mean
  // loss (0-d); model.backward(g), model.forward(x); optimizer.step(), optimizer.zero_grad();
  // Tensor::item() (waits for the device).
  // TODO(task3) BEGIN: one training step on this batch (chapter §1): afterwards the weights
  // have moved once, by this batch's gradient alone (backward ADDS to the gradients). Returns
  // {the batch's mean loss before the update, the correct predictions, the batch size}.
  // Stuck: tools/hint 01 3 (about 10 lines).
  optimizer.zero_grad();
  Tensor logits = model.forward(inputs);
  Tensor loss = loss_fn.forward(logits, labels);
  model.backward(loss_fn.backward());
  optimizer.step();
  StepResult r;
  r.loss = loss.item();  // waits for the device: the host needs the number
  r.correct = count_correct(logits, labels);
  r.samples = inputs.size(0);
  return r;
  // TODO(task3) END
}

EvalResult evaluate(nn::Module& model, data::DataLoader& loader) {
  // What you have: count_correct(logits, labels); data::Batch (inputs, labels);
  // loader.next(batch) -> false once the pass is over, loader.start_epoch(e) starts a pass;
  // model.eval(), model.forward(x), model.train(); nn::CrossEntropyLoss; Tensor::item().
  // TODO(task3) BEGIN: the mean loss and the accuracy over one pass of the loader in
  // evaluation mode (no parameter or running statistic changes), the model back in training
  // mode afterwards. Batches may differ in size (the last one): the mean is over samples, not
  // over batches. Returns {loss, accuracy (a fraction), samples}. Stuck: tools/hint 01 3
  // (about 15 lines).
  model.eval();
  nn::CrossEntropyLoss loss_fn;
  double loss_sum = 0;
  std::int64_t correct = 0, samples = 0;
  loader.start_epoch(0);
  data::Batch batch;
  while (loader.next(batch)) {
    Tensor logits = model.forward(batch.inputs);
    const std::int64_t n = batch.labels.numel();
    loss_sum += loss_fn.forward(logits, batch.labels).item() * static_cast<double>(n);
    correct += count_correct(logits, batch.labels);
    samples += n;
  }
  model.train();
  EvalResult r;
  r.samples = samples;
  if (samples > 0) {
    r.loss = loss_sum / static_cast<double>(samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(samples);
  }
  return r;
  // TODO(task3) END
}

}  // namespace mgpu::lesson01
