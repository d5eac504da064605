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
  // TODO(task3) BEGIN: model.eval(); go through one epoch of the loader
  // (loader.start_epoch(0), then while (loader.next(batch))): forward, the batch's mean loss
  // (an nn::CrossEntropyLoss) and count_correct. Batches can differ in size (the last one),
  // so weight each batch's mean loss by its size. model.train() at the end.
  // Return the mean loss, the accuracy (a fraction) and the number of samples. (about 15 lines)
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
