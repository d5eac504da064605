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
  auto m = std::make_shared<nn::Sequential>();
  if (name == "mlp") {
    m->add(std::make_shared<nn::Flatten>());
    m->add(std::make_shared<Linear>(28 * 28, 256));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<Linear>(256, 128));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<Linear>(128, 10));
  } else if (name == "cnn") {
    // Two conv blocks: 1x28x28 -> 32x14x14 -> 64x7x7, then the classifier.
    m->add(std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1));
    m->add(std::make_shared<nn::BatchNorm2d>(32));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::MaxPool2d>(2));
    m->add(std::make_shared<nn::Conv2d>(32, 64, 3, 1, 1));
    m->add(std::make_shared<nn::BatchNorm2d>(64));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::MaxPool2d>(2));
    m->add(std::make_shared<nn::Flatten>());
    m->add(std::make_shared<Linear>(64 * 7 * 7, 128));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<Linear>(128, 10));
  } else {
    MGPU_FAIL("unknown model '", name, "': choose mlp or cnn");
  }
  return m;
}

}  // namespace mgpu::lesson01
