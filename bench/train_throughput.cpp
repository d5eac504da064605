// Training throughput of lesson 01's models: samples/s of a whole training step (forward,
// loss, backward, SGD with momentum) at a given batch size, with the batch already on the
// device, so the number is the model's and not the data loader's.
//
//   build/bench/bench_train                       mlp and cnn, batch 256, cpu (+ cuda if any)
//   build/bench/bench_train --device cuda --batch-size 64 --batch-size 256 --batch-size 1024
//
// Beside samples/s it prints the achieved GFLOP/s, from the models' matrix-product FLOPs
// (a training step costs about 3x the forward: the forward GEMMs, and two GEMMs of the same
// size in backward). bench/train_torch.py prints the same table for PyTorch.
#include <cstdio>
#include <sstream>

#include "bench_util.h"
#include "mgpu/app/flags.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/stream.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace nn = mgpu::nn;

/// Forward matrix-product FLOPs per sample (2 per multiply-add).
double forward_flops(const std::string& name) {
  if (name == "mlp") return 2.0 * (784 * 256 + 256 * 128 + 128 * 10);
  return 2.0 * (28 * 28 * 9 * 32 + 14 * 14 * 288 * 64 + 3136 * 128 + 128 * 10);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> devices, models = {"mlp", "cnn"};
  std::vector<std::int64_t> batches = {256};
  int reps = 20, warmup = 3;
  CLI::App app{"Training-step throughput (samples/s) of lesson 01's MLP and CNN."};
  app.add_option("--device", devices, "cpu, cuda, ... (repeatable; default: cpu, and cuda if present)");
  app.add_option("--model", models, "mlp and/or cnn (repeatable)")
      ->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--batch-size", batches, "batch size(s) (repeatable)")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  app.add_option("--reps", reps, "timed steps; the median is printed")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")
      ->check(mgpu::app::non_negative_integer())->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  bench::Options timing;
  timing.reps = reps;
  timing.warmup = warmup;
  if (devices.empty()) {
    devices.push_back("cpu");
    if (mgpu::cuda_available()) devices.push_back("cuda");
  }
  try {
    std::printf("training step = forward + cross-entropy + backward + SGD(lr 0.01, momentum 0.9);"
                " median of %d steps after %d warm-up steps\n", reps, warmup);
    std::printf("%-5s %-28s %7s %10s %12s %10s\n", "model", "device", "batch", "step_ms",
                "samples/s", "GFLOP/s");
    for (const std::string& dev_name : devices) {
      const Device device = Device::parse(dev_name);
      std::istringstream mapping(mgpu::describe_mapping({device}));
      std::string where;
      std::getline(mapping, where);
      for (const std::string& name : models)
        for (std::int64_t batch : batches) {
          nn::manual_seed(0);
          auto model = nn::make_model(name);  // lesson 01's models
          model->to(device);
          mgpu::optim::SGD opt(model->parameters(), {0.01, 0.9, 0.0});
          nn::CrossEntropyLoss loss_fn;
          Tensor x = Tensor::empty({batch, 1, 28, 28}, mgpu::DType::f32, device);
          mgpu::normal_(x, 1);
          std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
          for (std::int64_t i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
          Tensor y = Tensor::from_vector(labels, {batch}, device);
          const double ms = bench::median_ms(device, timing, [&] {
            opt.zero_grad();
            Tensor logits = model->forward(x);
            loss_fn.forward(logits, y);
            model->backward(loss_fn.backward());
            opt.step();
          });
          const double samples_per_s = static_cast<double>(batch) / (ms * 1e-3);
          std::printf("%-5s %-28s %7lld %10.2f %12.0f %10.1f\n", name.c_str(),
                      where.substr(0, 28).c_str(), static_cast<long long>(batch), ms,
                      samples_per_s, 3 * forward_flops(name) * samples_per_s * 1e-9);
          std::fflush(stdout);
        }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
