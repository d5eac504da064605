// Accuracy counting and evaluation (see evaluate.h).
#include "mgpu/app/evaluate.h"

#include <vector>

#include "mgpu/nn/loss.h"
#include "mgpu/ops.h"

namespace mgpu::app {

std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  check_defined("count_correct", logits, "logits");
  check_defined("count_correct", labels, "labels");
  MGPU_CHECK(logits.ndim() == 2 && labels.ndim() == 1 && labels.size(0) == logits.size(0),
             "count_correct: logits ", logits.str(), " and labels ", labels.str(),
             " do not match: expected [N, classes] and [N]");
  const std::vector<std::int64_t> predicted = argmax_last(logits).to_vector<std::int64_t>();
  const std::vector<std::int64_t> truth = labels.to_vector<std::int64_t>();
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i] ? 1 : 0;
  return correct;
}

std::vector<double> sum_over_ranks(dist::ProcessGroup& group, const std::vector<double>& values) {
  Tensor t = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  group.all_reduce(t, dist::ReduceOp::sum).wait();
  return t.to_vector<double>();
}

EvalResult evaluate(const std::function<Tensor(const Tensor&)>& forward, data::DataLoader& loader,
                    dist::ProcessGroup* sum_over) {
  nn::CrossEntropyLoss loss_fn;
  double loss_sum = 0, correct = 0, samples = 0;
  loader.start_epoch(0);
  data::Batch batch;
  while (loader.next(batch)) {
    const Tensor logits = forward(batch.inputs);
    const Tensor labels = batch.labels.to(logits.device());
    const std::int64_t n = labels.numel();
    loss_sum += loss_fn.forward(logits, labels).item() * static_cast<double>(n);
    correct += static_cast<double>(count_correct(logits, labels));
    samples += static_cast<double>(n);
  }
  if (sum_over) {
    const std::vector<double> s = sum_over_ranks(*sum_over, {loss_sum, correct, samples});
    loss_sum = s[0], correct = s[1], samples = s[2];
  }
  EvalResult r;
  r.samples = static_cast<std::int64_t>(samples);
  if (samples > 0) {
    r.loss = loss_sum / samples;
    r.accuracy = correct / samples;
  }
  return r;
}

EvalResult evaluate(nn::Module& model, data::DataLoader& loader, dist::ProcessGroup* sum_over) {
  model.eval();
  EvalResult r = evaluate([&](const Tensor& x) { return model.forward(x); }, loader, sum_over);
  model.train();
  return r;
}

}  // namespace mgpu::app
