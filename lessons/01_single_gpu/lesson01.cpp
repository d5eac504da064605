// Given: counting correct predictions, and the lesson's two models.
#include "lesson01.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"

namespace mgpu::lesson01 {

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

std::shared_ptr<nn::Sequential> make_model(const std::string& name) {
  // The library's definition of the two models, with this lesson's Linear in them.
  return nn::fashion_mnist_model(name, [](std::int64_t in, std::int64_t out) {
    return std::static_pointer_cast<nn::Module>(std::make_shared<Linear>(in, out));
  });
}

}  // namespace mgpu::lesson01
