// The course's models (see models.h).
#include "mgpu/nn/models.h"

#include "mgpu/error.h"
#include "mgpu/nn/activation.h"
#include "mgpu/nn/batchnorm.h"
#include "mgpu/nn/conv2d.h"
#include "mgpu/nn/linear.h"
#include "mgpu/nn/maxpool2d.h"

namespace mgpu::nn {

const std::vector<ModelInfo>& model_catalog() {
  static const std::vector<ModelInfo> catalog = {
      {"mlp", "784-256-128-10 MLP"},
      {"mlp-bn", "784-256-128-10 MLP, BatchNorm1d after the first layer"},
      {"deep-mlp", "784-512-512-256-256-10 MLP"},
      {"cnn", "conv blocks of 32 and 64 channels with BatchNorm2d, then 3136-128-10"},
      {"cnn-small", "conv blocks of 16 and 32 channels with BatchNorm2d, then 1568-10"},
      {"wide-mlp", "784-1024x9-10 MLP: 35 MiB of gradients, several DDP buckets"},
  };
  return catalog;
}

std::string model_summary(const std::string& name) {
  for (const ModelInfo& m : model_catalog())
    if (name == m.name) return m.summary;
  std::string known;
  for (const ModelInfo& m : model_catalog()) known += std::string(known.empty() ? "" : ", ") + m.name;
  MGPU_FAIL("unknown model '", name, "': choose one of ", known);
}

namespace {

// A chain of Linear layers with a ReLU between two of them; BatchNorm1d after the first
// one when `batchnorm`.
void add_mlp(Sequential& m, const LinearFactory& linear, std::int64_t in,
             const std::vector<std::int64_t>& widths, bool batchnorm) {
  m.add(std::make_shared<Flatten>());
  for (std::size_t i = 0; i < widths.size(); ++i) {
    m.add(linear(in, widths[i]));
    if (i + 1 == widths.size()) break;  // the classifier: no activation after it
    if (batchnorm && i == 0) m.add(std::make_shared<BatchNorm1d>(widths[i]));
    m.add(std::make_shared<ReLU>());
    in = widths[i];
  }
}

// Conv2d 3x3 (padding 1), BatchNorm2d, ReLU, MaxPool2d(2): halves H and W.
void add_conv_block(Sequential& m, std::int64_t in_channels, std::int64_t out_channels) {
  m.add(std::make_shared<Conv2d>(in_channels, out_channels, 3, 1, 1));
  m.add(std::make_shared<BatchNorm2d>(out_channels));
  m.add(std::make_shared<ReLU>());
  m.add(std::make_shared<MaxPool2d>(2));
}

}  // namespace

std::shared_ptr<Sequential> make_model(const std::string& name, const Shape& sample_shape,
                                       std::int64_t num_classes, const LinearFactory& make_linear) {
  model_summary(name);  // throws for an unknown name, listing the known ones
  const LinearFactory linear = make_linear ? make_linear : [](std::int64_t in, std::int64_t out) {
    return std::static_pointer_cast<Module>(std::make_shared<Linear>(in, out));
  };
  const std::int64_t features = shape_numel(sample_shape);
  MGPU_CHECK(features > 0 && num_classes >= 2, "model '", name, "': samples of shape ",
             shape_str(sample_shape), " in ", num_classes,
             " classes (need at least one feature and two classes)");
  auto m = std::make_shared<Sequential>();
  if (name == "mlp") add_mlp(*m, linear, features, {256, 128, num_classes}, false);
  if (name == "mlp-bn") add_mlp(*m, linear, features, {256, 128, num_classes}, true);
  if (name == "deep-mlp") add_mlp(*m, linear, features, {512, 512, 256, 256, num_classes}, false);
  if (name == "wide-mlp") {
    std::vector<std::int64_t> widths(9, 1024);  // 4 MiB of f32 gradients per 1024x1024 layer
    widths.push_back(num_classes);
    add_mlp(*m, linear, features, widths, false);
  }
  if (name == "cnn" || name == "cnn-small") {
    MGPU_CHECK(sample_shape.size() == 3 && sample_shape[1] % 4 == 0 && sample_shape[2] % 4 == 0,
               "model '", name, "' needs image samples [C, H, W] with H and W divisible by 4, got ",
               shape_str(sample_shape));
    const bool small = name == "cnn-small";
    const std::int64_t c1 = small ? 16 : 32, c2 = small ? 32 : 64;
    // Two blocks: C x H x W -> c1 x H/2 x W/2 -> c2 x H/4 x W/4, then the classifier.
    add_conv_block(*m, sample_shape[0], c1);
    add_conv_block(*m, c1, c2);
    m->add(std::make_shared<Flatten>());
    const std::int64_t flat = c2 * (sample_shape[1] / 4) * (sample_shape[2] / 4);
    if (small) {
      m->add(linear(flat, num_classes));
    } else {
      m->add(linear(flat, 128));
      m->add(std::make_shared<ReLU>());
      m->add(linear(128, num_classes));
    }
  }
  return m;
}

}  // namespace mgpu::nn
