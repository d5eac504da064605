// Training throughput of lesson 01's models: samples/s of a whole training step (forward,
// loss, backward, SGD with momentum) at a given batch size, with the batch already on the
// device, so the number is the model's and not the data loader's.
//
//   build/bench/bench_train                       mlp and cnn, batch 256, cpu (+ cuda if any)
//   build/bench/bench_train --device cuda --batch-size 64 --batch-size 256 --batch-size 1024
//   build/bench/bench_train --threads 1           one CPU thread for the library's loops and products
//   build/bench/bench_train --device cuda --precision bf16   forward under the bf16 autocast policy
//
// Beside samples/s it prints the achieved GFLOP/s, from the models' matrix-product FLOPs
// (a training step costs about 3x the forward: the forward GEMMs, and two GEMMs of the same
// size in backward, less the first layer's input gradient, which nothing needs), and the
// allocator's counters per step: blocks handed to tensors, and blocks the allocator had to
// get from the system (0 once warm). bench/train_torch.py
// prints the same table for PyTorch; bench/cpu_vs_torch.py runs both interleaved, with
// --serve: the contenders are built and warmed up, then run steps on request (stdin
// "step MODEL BATCH N" answers "ms T1 ... TN"; "quit" ends).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "mgpu/allocator.h"
#include "mgpu/amp/all.h"
#include "mgpu/app/flags.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/stream.h"
#include "mgpu/threads.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace nn = mgpu::nn;

/// Forward matrix-product FLOPs per sample (2 per multiply-add).
double forward_flops(const std::string& name) {
  if (name == "mlp") return 2.0 * (784 * 256 + 256 * 128 + 128 * 10);
  return 2.0 * (28 * 28 * 9 * 32 + 14 * 14 * 288 * 64 + 3136 * 128 + 128 * 10);
}

/// The first layer's share of forward_flops: its input is the batch, whose gradient the
/// step skips (set_input_requires_grad(false)).
double first_layer_flops(const std::string& name) {
  if (name == "mlp") return 2.0 * 784 * 256;
  return 2.0 * 28 * 28 * 9 * 32;
}

/// A training step's FLOPs per sample: the forward's, the weight gradients' (as many), and
/// the input gradients' (as many, but for the first layer's).
double step_flops(const std::string& name) {
  return 3 * forward_flops(name) - first_layer_flops(name);
}

/// One model in training: its optimizer, a fixed random batch, and the step.
struct Contender {
  Device device;
  bool bf16 = false;  // forward under amp::Autocast(bf16), as torch.autocast in train_torch.py
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<mgpu::optim::SGD> opt;
  nn::CrossEntropyLoss loss_fn;
  Tensor x, y;

  Contender(const std::string& name, std::int64_t batch, const Device& d, bool bf16_autocast)
      : device(d), bf16(bf16_autocast) {
    nn::manual_seed(0);
    model = nn::make_model(name);  // lesson 01's models
    // The batch is data: no gradient for it, as PyTorch's autograd knows (train_torch.py).
    model->set_input_requires_grad(false);
    model->to(device);
    opt = std::make_unique<mgpu::optim::SGD>(model->parameters(), mgpu::optim::SGDOptions{0.01, 0.9, 0.0});
    x = Tensor::empty({batch, 1, 28, 28}, mgpu::DType::f32, device);
    mgpu::normal_(x, 1);
    std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
    for (std::int64_t i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
    y = Tensor::from_vector(labels, {batch}, device);
  }

  void step() {
    opt->zero_grad();
    Tensor logits;
    if (bf16) {
      mgpu::amp::Autocast region(mgpu::DType::bf16);
      logits = model->forward(x);
    } else {
      logits = model->forward(x);
    }
    loss_fn.forward(logits, y);
    model->backward(loss_fn.backward());
    opt->step();
  }

  /// Milliseconds of one step. Events on the device's stream time GPU work by the GPU's
  /// clock (a launch returns before its kernel ran); on the CPU they read the wall clock.
  double timed_step() {
    mgpu::Event start(true), stop(true);
    const mgpu::Stream s = mgpu::Stream::current(device);
    start.record(s);
    step();
    stop.record(s);
    stop.synchronize();
    return stop.elapsed_ms(start);
  }
};

/// --serve: answer "step MODEL BATCH N" with N step times until "quit" or end of input.
int serve(std::map<std::string, std::unique_ptr<Contender>>& contenders) {
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string verb, name;
    std::int64_t batch = 0;
    int n = 0;
    in >> verb;
    if (verb == "quit") break;
    in >> name >> batch >> n;
    auto it = contenders.find(name + " " + std::to_string(batch));
    if (verb != "step" || it == contenders.end() || n < 1) {
      std::printf("error: expected 'step MODEL BATCH N' for a model and batch given at start, got '%s'\n",
                  line.c_str());
      std::fflush(stdout);
      continue;
    }
    std::printf("ms");
    for (int i = 0; i < n; ++i) std::printf(" %.4f", it->second->timed_step());
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> devices, models = {"mlp", "cnn"};
  std::vector<std::int64_t> batches = {256};
  int reps = 20, warmup = 3;
  int threads = bench::default_threads();
  bool serve_mode = false;
  std::string precision = "fp32";
  CLI::App app{"Training-step throughput (samples/s) of lesson 01's MLP and CNN."};
  app.add_option("--device", devices, "cpu, cuda, ... (repeatable; default: cpu, and cuda if present)");
  app.add_option("--model", models, "mlp and/or cnn (repeatable)")
      ->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--batch-size", batches, "batch size(s) (repeatable)")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  app.add_option("--reps", reps, "timed steps; the median [min-max] is printed")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")
      ->check(mgpu::app::non_negative_integer())->capture_default_str();
  app.add_option("--precision", precision, "fp32, or bf16: the forward under the autocast policy "
                 "(16-bit GEMM operands, f32 master weights)")
      ->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  bench::add_threads_option(app, threads);
  app.add_flag("--serve", serve_mode, "build and warm up, then run steps on request (see the top of the source)");
  CLI11_PARSE(app, argc, argv);
  if (devices.empty()) {
    devices.push_back("cpu");
    if (mgpu::cuda_available()) devices.push_back("cuda");
  }
  try {
    mgpu::set_num_threads(threads);
    if (serve_mode) {
      MGPU_CHECK(devices.size() == 1, "--serve takes one --device");
      std::map<std::string, std::unique_ptr<Contender>> contenders;
      for (const std::string& name : models)
        for (std::int64_t batch : batches) {
          auto c = std::make_unique<Contender>(name, batch, Device::parse(devices[0]), precision == "bf16");
          for (int i = 0; i < warmup; ++i) c->step();
          contenders[name + " " + std::to_string(batch)] = std::move(c);
        }
      std::printf("mgpu: %s\n", mgpu::cpu_threading_summary().c_str());
      return serve(contenders);
    }
    std::printf("training step = forward + cross-entropy + backward + SGD(lr 0.01, momentum 0.9), %s;"
                " median [min-max] of %d steps after %d warm-up steps\n", precision.c_str(), reps, warmup);
    std::printf("CPU: %s; load average %s\n", mgpu::cpu_threading_summary().c_str(),
                bench::load_average().c_str());
    std::printf("%-5s %-28s %7s %24s %12s %10s %12s %10s\n", "model", "device", "batch", "step_ms",
                "samples/s", "GFLOP/s", "allocs/step", "new/step");
    for (const std::string& dev_name : devices) {
      const Device device = Device::parse(dev_name);
      std::istringstream mapping(mgpu::describe_mapping({device}));
      std::string where;
      std::getline(mapping, where);
      for (const std::string& name : models)
        for (std::int64_t batch : batches) {
          Contender c(name, batch, device, precision == "bf16");
          for (int i = 0; i < warmup; ++i) c.step();
          mgpu::synchronize(device);
          const mgpu::MemoryStats before = mgpu::memory_stats(device);
          std::vector<double> ms;
          for (int r = 0; r < reps; ++r) ms.push_back(c.timed_step());
          const mgpu::MemoryStats after = mgpu::memory_stats(device);
          std::sort(ms.begin(), ms.end());
          const double median = ms.size() % 2 ? ms[ms.size() / 2]
                                              : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
          const double samples_per_s = static_cast<double>(batch) / (median * 1e-3);
          char step_text[64];
          std::snprintf(step_text, sizeof step_text, "%.2f [%.2f-%.2f]", median, ms.front(), ms.back());
          std::printf("%-5s %-28s %7lld %24s %12.0f %10.1f %12.1f %10.1f\n", name.c_str(),
                      where.substr(0, 28).c_str(), static_cast<long long>(batch), step_text,
                      samples_per_s, step_flops(name) * samples_per_s * 1e-9,
                      static_cast<double>(after.allocations - before.allocations) / reps,
                      static_cast<double>(after.device_mallocs - before.device_mallocs) / reps);
          std::fflush(stdout);
        }
    }
    std::printf("load average after: %s\n", bench::load_average().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
