// Task 1: cut a Sequential into stages on different devices, and move activations forward
// and gradients backward between them. This is model parallelism with the naive schedule:
// correct, but only one device works at a time.
#include "pipeline.h"

namespace mgpu::lesson03 {

Tensor Stage::forward(const Tensor& x) {
  check_defined("Stage::forward", x, "x");
  MGPU_CHECK(x.device() == device, "Stage::forward: the input is ", x.str(),
             " but the stage lives on ", device.str(), "; copy it first (x.to(stage.device))");
  Tensor h = x;
  // What you have: layers (the stage's modules, in model order); a module's forward(x).
  // TODO(task1) BEGIN: h becomes the stage's output, on the stage's device: its layers
  // applied in model order (chapter §2). Stuck: tools/hint 03 1 (about 2 lines).
  for (auto& layer : layers) h = layer->forward(h);
  // TODO(task1) END
  return h;
}

Tensor Stage::backward(const Tensor& grad_out) {
  check_defined("Stage::backward", grad_out, "grad_out");
  MGPU_CHECK(grad_out.device() == device, "Stage::backward: the gradient is ", grad_out.str(),
             " but the stage lives on ", device.str(), "; copy it first");
  Tensor g = grad_out;
  // What you have: layers; a module's backward(grad_out) -> the gradient of its input.
  // TODO(task1) BEGIN: g becomes the gradient of the stage's input from the gradient of its
  // output: the chain rule through the stage's layers (chapter §2). Stuck: tools/hint 03 1
  // (about 2 lines).
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) g = (*it)->backward(g);
  // TODO(task1) END
  return g;
}

std::vector<Stage> split_model(nn::Sequential& model, const std::vector<std::size_t>& boundaries,
                               const std::vector<Device>& devices) {
  const std::size_t n = model.size();
  MGPU_CHECK(!devices.empty(), "split_model: no devices given");
  MGPU_CHECK(boundaries.size() + 1 == devices.size(), "split_model: ", devices.size(),
             " devices need ", devices.size() - 1, " boundaries, got ", boundaries.size());
  for (std::size_t i = 0; i < boundaries.size(); ++i) {
    MGPU_CHECK(boundaries[i] >= 1 && boundaries[i] < n, "split_model: boundary ", boundaries[i],
               " is outside [1, ", n - 1, "]: every stage needs at least one of the ", n, " layers");
    MGPU_CHECK(i == 0 || boundaries[i] > boundaries[i - 1],
               "split_model: boundaries must be strictly increasing, got ", boundaries[i - 1],
               " then ", boundaries[i]);
  }
  std::vector<Stage> stages(devices.size());
  // What you have: a module's to(device); a Stage's device, first_layer and layers;
  // model.at(i) -> layer i (shared); n = model.size().
  // TODO(task1) BEGIN: stage k holds, on devices[k], the consecutive layers from boundary k-1
  // (0 for the first stage) up to boundary k (n for the last), in order, and knows the index
  // of its first layer (chapter §2). Every layer belongs to exactly one stage, and is the
  // model's own (shared, not copied). Stuck: tools/hint 03 1 (about 10 lines).
  for (std::size_t k = 0; k < devices.size(); ++k) {
    const std::size_t begin = k == 0 ? 0 : boundaries[k - 1];
    const std::size_t end = k + 1 == devices.size() ? n : boundaries[k];
    stages[k].device = devices[k];
    stages[k].first_layer = begin;
    for (std::size_t i = begin; i < end; ++i) {
      std::shared_ptr<nn::Module> layer = model.at(i);
      layer->to(devices[k]);
      stages[k].layers.push_back(layer);
    }
  }
  // TODO(task1) END
  return stages;
}

Tensor forward_through(std::vector<Stage>& stages, const Tensor& x) {
  MGPU_CHECK(!stages.empty(), "forward_through: no stages");
  Tensor h = x;
  // What you have: a Stage's device and forward(x) (x must be on the stage's device);
  // h.to(device).
  // TODO(task1) BEGIN: h becomes the model's output, on the last stage's device: the input
  // through every stage in order, each stage reading its input on its own device (chapter
  // §2). Stuck: tools/hint 03 1 (about 2 lines).
  for (Stage& s : stages) h = s.forward(h.to(s.device));
  // TODO(task1) END
  return h;
}

Tensor backward_through(std::vector<Stage>& stages, const Tensor& grad_out) {
  MGPU_CHECK(!stages.empty(), "backward_through: no stages");
  Tensor g = grad_out;
  // What you have: a Stage's device and backward(grad_out) (on the stage's device); g.to(device).
  // TODO(task1) BEGIN: g becomes the gradient of the model's input, on the first stage's
  // device: the output's gradient through every stage, each stage reading it on its own
  // device (chapter §2). Stuck: tools/hint 03 1 (about 2 lines).
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) g = it->backward(g.to(it->device));
  // TODO(task1) END
  return g;
}

}  // namespace mgpu::lesson03
