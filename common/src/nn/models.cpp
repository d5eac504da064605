// The course's Fashion-MNIST models (see models.h).
#include "mgpu/nn/models.h"

#include "mgpu/error.h"
#include "mgpu/nn/activation.h"
#include "mgpu/nn/batchnorm.h"
#include "mgpu/nn/conv2d.h"
#include "mgpu/nn/linear.h"
#include "mgpu/nn/maxpool2d.h"

namespace mgpu::nn {

std::shared_ptr<Sequential> fashion_mnist_model(const std::string& name,
                                                const LinearFactory& make_linear) {
  const LinearFactory linear = make_linear ? make_linear : [](std::int64_t in, std::int64_t out) {
    return std::static_pointer_cast<Module>(std::make_shared<Linear>(in, out));
  };
  auto m = std::make_shared<Sequential>();
  if (name == "mlp") {
    m->add(std::make_shared<Flatten>());
    m->add(linear(28 * 28, 256));
    m->add(std::make_shared<ReLU>());
    m->add(linear(256, 128));
    m->add(std::make_shared<ReLU>());
    m->add(linear(128, 10));
  } else if (name == "cnn") {
    // Two conv blocks: 1x28x28 -> 32x14x14 -> 64x7x7, then the classifier.
    m->add(std::make_shared<Conv2d>(1, 32, 3, 1, 1));
    m->add(std::make_shared<BatchNorm2d>(32));
    m->add(std::make_shared<ReLU>());
    m->add(std::make_shared<MaxPool2d>(2));
    m->add(std::make_shared<Conv2d>(32, 64, 3, 1, 1));
    m->add(std::make_shared<BatchNorm2d>(64));
    m->add(std::make_shared<ReLU>());
    m->add(std::make_shared<MaxPool2d>(2));
    m->add(std::make_shared<Flatten>());
    m->add(linear(64 * 7 * 7, 128));
    m->add(std::make_shared<ReLU>());
    m->add(linear(128, 10));
  } else {
    MGPU_FAIL("unknown model '", name, "': choose mlp or cnn");
  }
  return m;
}

}  // namespace mgpu::nn
