// train: lesson 01's program. Trains the MLP or the CNN on Fashion-MNIST on one device with
// your Linear, your SGD and your training step, and reports accuracy and speed.
//
//   build/solutions/01_single_gpu/train --model mlp
//   build/solutions/01_single_gpu/train --model cnn --device cuda --metrics cnn.jsonl
//   build/lessons/01_single_gpu/train --data synthetic --epochs 1      (your code)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "lesson01.h"
#include "mgpu/data/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/stream.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace data = mgpu::data;
namespace l01 = mgpu::lesson01;

struct Options {
  std::string model = "mlp";
  std::string device = "cpu";
  std::string data = data::FashionMNIST::kDefaultDir;
  int epochs = 10;
  std::int64_t batch_size = 64;
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::string schedule = "cosine";
  std::uint64_t seed = 0;
  std::int64_t train_samples = 0;  // 0: the whole training set
  std::string metrics, trace;
};

constexpr double kPi = 3.14159265358979323846;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The first `n` indices of the dataset, shuffled by (seed, epoch): a smaller training set
/// for quick runs (--train-samples).
class PrefixSampler : public data::Sampler {
 public:
  PrefixSampler(std::int64_t n, std::uint64_t seed) : n_(n), seed_(seed) {}
  std::vector<std::int64_t> indices(std::int64_t epoch) const override {
    return data::shuffled_indices(n_, seed_, epoch);
  }

 private:
  std::int64_t n_;
  std::uint64_t seed_;
};

/// Phases of the run as Chrome trace events ("X" = complete event with a duration), which
/// https://ui.perfetto.dev and chrome://tracing draw as a timeline.
class Trace {
 public:
  explicit Trace(bool on, Device device) : on_(on), device_(device), t0_(now_s()) {
    // Metadata: the timeline's one row is named after the device.
    events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0},
                       {"args", {{"name", device.str()}}}});
  }
  bool on() const { return on_; }
  /// Marks the start of a phase. On a GPU, kernels are only queued by the host: the trace
  /// waits for the device at each boundary so a phase's box covers its GPU work.
  double begin() {
    if (on_ && device_.is_cuda()) mgpu::synchronize(device_);
    return now_s();
  }
  void end(const char* name, double start) {
    if (!on_) return;
    if (device_.is_cuda()) mgpu::synchronize(device_);
    const double stop = now_s();
    events_.push_back({{"name", name}, {"ph", "X"}, {"pid", 0}, {"tid", 0},
                       {"ts", (start - t0_) * 1e6}, {"dur", (stop - start) * 1e6}});
  }
  void write(const std::string& path) const {
    std::ofstream out(path);
    MGPU_CHECK(out.good(), "--trace: cannot write ", path);
    out << nlohmann::json{{"traceEvents", events_}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  }

 private:
  bool on_;
  Device device_;
  double t0_;
  std::vector<nlohmann::json> events_;
};

/// Runs a model and records its forward and backward as trace phases. train_step sees an
/// ordinary Module (and TracedOptimizer an ordinary Optimizer), so the trace shows the
/// phases inside your step without the step knowing.
class TracedModel : public mgpu::nn::Module {
 public:
  TracedModel(mgpu::nn::Module& inner, Trace& trace) : inner_(inner), trace_(trace) {}
  Tensor forward(const Tensor& x) override {
    const double t = trace_.begin();
    Tensor y = inner_.forward(x);
    trace_.end("forward", t);
    return y;
  }
  Tensor backward(const Tensor& grad_out) override {
    const double t = trace_.begin();
    Tensor g = inner_.backward(grad_out);
    trace_.end("backward", t);
    return g;
  }
  std::shared_ptr<mgpu::nn::Module> clone() const override { return inner_.clone(); }
  std::string describe() const override { return inner_.describe(); }

 private:
  mgpu::nn::Module& inner_;
  Trace& trace_;
};

class TracedOptimizer : public mgpu::optim::Optimizer {
 public:
  TracedOptimizer(mgpu::optim::Optimizer& inner, Trace& trace)
      : Optimizer(inner.params(), inner.lr()), inner_(inner), trace_(trace) {}
  void step() override {
    const double t = trace_.begin();
    inner_.step();
    trace_.end("optimizer", t);
  }
  std::string describe() const override { return inner_.describe(); }

 protected:
  std::vector<std::string> state_keys() const override { return {}; }

 private:
  mgpu::optim::Optimizer& inner_;
  Trace& trace_;
};

int run(const Options& opt) {
  const Device device = Device::parse(opt.device);
  const bool terminal = isatty(fileno(stdout)) != 0;
  std::string mapping = mgpu::describe_mapping({device});
  if (!mapping.empty() && mapping.back() == '\n') mapping.pop_back();
  std::printf("lesson 01: training on one device\n%s\n", mapping.c_str());
  std::fflush(stdout);

  // Step 0) data: the training set shuffled every epoch, the test set in order.
  auto train_set = data::open_dataset(opt.data, data::Split::train, opt.seed);
  auto test_set = data::open_dataset(opt.data, data::Split::test, opt.seed);
  MGPU_CHECK(opt.train_samples >= 0 && opt.train_samples <= train_set->size(),
             "--train-samples ", opt.train_samples, " is not in [0, ", train_set->size(), "]");
  const std::int64_t n_train = opt.train_samples > 0 ? opt.train_samples : train_set->size();
  data::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.seed = opt.seed;
  lo.device = device;
  data::DataLoader train_loader(train_set, lo, std::make_shared<PrefixSampler>(n_train, opt.seed));
  lo.batch_size = 1000;
  lo.shuffle = false;
  data::DataLoader test_loader(test_set, lo);
  std::printf("data: %s (using %lld)\n      %s\n", train_set->describe().c_str(),
              static_cast<long long>(n_train), test_set->describe().c_str());

  // The model and the optimizer: your Linear and your SGD.
  mgpu::nn::manual_seed(opt.seed);
  auto model = l01::make_model(opt.model);
  model->to(device);
  l01::SGD optimizer(model->parameters(), opt.lr, opt.momentum, opt.weight_decay);
  mgpu::nn::CrossEntropyLoss loss_fn;
  std::printf("model: %s, %lld parameters; %s, %s schedule over %d epochs\n",
              opt.model.c_str(), static_cast<long long>(model->num_parameters()),
              optimizer.describe().c_str(), opt.schedule.c_str(), opt.epochs);
  std::printf("batch: %lld per rank, global %lld (1 rank); %lld steps per epoch\n",
              static_cast<long long>(opt.batch_size), static_cast<long long>(opt.batch_size),
              static_cast<long long>(train_loader.num_batches()));

  std::ofstream metrics;
  if (!opt.metrics.empty()) {
    metrics.open(opt.metrics);
    MGPU_CHECK(metrics.good(), "--metrics: cannot write ", opt.metrics);
  }
  Trace trace(!opt.trace.empty(), device);
  TracedModel traced_model(*model, trace);
  TracedOptimizer traced_optimizer(optimizer, trace);
  // Without --trace the step gets the model and optimizer themselves: no wrapper at all.
  mgpu::nn::Module& step_model = trace.on() ? static_cast<mgpu::nn::Module&>(traced_model) : *model;
  mgpu::optim::Optimizer& step_optimizer =
      trace.on() ? static_cast<mgpu::optim::Optimizer&>(traced_optimizer) : optimizer;

  const double run_start = now_s();
  double train_time = 0, last_train_loss = 0, last_test_acc = 0;
  std::int64_t trained_samples = 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    // The learning rate of this epoch: constant, or a half cosine from lr down towards 0
    // (large steps while far from a minimum, small ones to settle into it at the end).
    const double lr = opt.schedule == "cosine"
                          ? opt.lr * 0.5 * (1.0 + std::cos(kPi * epoch / opt.epochs))
                          : opt.lr;
    optimizer.set_lr(lr);
    const double epoch_start = now_s();
    train_loader.start_epoch(epoch);
    double loss_sum = 0;
    std::int64_t correct = 0, seen = 0, steps = 0;
    double last_print = 0;
    data::Batch batch;
    while (true) {
      // Step 1) data: the next batch, already on the device (or waiting for it).
      const double t_data = trace.begin();
      if (!train_loader.next(batch)) break;
      trace.end("data wait", t_data);
      // Steps 2-5) forward, loss, backward, optimizer: your train_step.
      const l01::StepResult r =
          l01::train_step(step_model, loss_fn, step_optimizer, batch.inputs, batch.labels);
      loss_sum += r.loss * static_cast<double>(r.samples);
      correct += r.correct;
      seen += r.samples;
      ++steps;
      if (terminal && now_s() - last_print > 0.25) {
        last_print = now_s();
        std::printf("\repoch %d/%d  step %lld/%lld  loss %.4f ", epoch + 1, opt.epochs,
                    static_cast<long long>(steps),
                    static_cast<long long>(train_loader.num_batches()), loss_sum / seen);
        std::fflush(stdout);
      }
    }
    mgpu::synchronize(device);
    const double epoch_train_time = now_s() - epoch_start;
    train_time += epoch_train_time;
    trained_samples += seen;
    if (terminal) std::printf("\r%*s\r", 60, "");

    const double t_eval = trace.begin();
    const l01::EvalResult test = l01::evaluate(*model, test_loader);
    trace.end("evaluate", t_eval);

    const double train_loss = seen ? loss_sum / static_cast<double>(seen) : 0;
    const double train_acc = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0;
    const double samples_per_s = static_cast<double>(seen) / epoch_train_time;
    const double step_ms = steps ? 1e3 * epoch_train_time / static_cast<double>(steps) : 0;
    last_train_loss = train_loss;
    last_test_acc = test.accuracy;
    std::printf("epoch %d/%d: lr=%.4g train_loss=%.4f train_acc=%.4f test_loss=%.4f "
                "test_acc=%.4f samples_per_s=%.0f step_ms=%.2f data_wait_s=%.2f time_s=%.1f\n",
                epoch + 1, opt.epochs, lr, train_loss, train_acc, test.loss, test.accuracy,
                samples_per_s, step_ms, train_loader.wait_seconds(), now_s() - run_start);
    std::fflush(stdout);
    if (metrics.is_open()) {
      metrics << nlohmann::json{{"epoch", epoch + 1},       {"lr", lr},
                                {"train_loss", train_loss},
                                {"train_acc", train_acc},   {"test_loss", test.loss},
                                {"test_acc", test.accuracy}, {"samples_per_s", samples_per_s},
                                {"step_ms", step_ms},       {"world_size", 1},
                                {"data_wait_s", train_loader.wait_seconds()},
                                {"time_s", now_s() - run_start}}
                     .dump()
              << "\n";
      metrics.flush();
    }
  }
  if (trace.on()) {
    trace.write(opt.trace);
    std::printf("trace: %s (open it in https://ui.perfetto.dev)\n", opt.trace.c_str());
  }
  std::printf("final: test_acc=%.4f train_loss=%.4f samples_per_s=%.0f time_s=%.1f\n",
              last_test_acc, last_train_loss,
              train_time > 0 ? static_cast<double>(trained_samples) / train_time : 0.0,
              now_s() - run_start);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Lesson 01: train an MLP or a CNN on Fashion-MNIST on one device."};
  app.add_option("--model", opt.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app.add_option("--device", opt.device, "cpu, cpu:N, cuda or cuda:N")->capture_default_str();
  app.add_option("--data", opt.data,
                 "folder with the Fashion-MNIST IDX files, or 'synthetic' for generated data")
      ->capture_default_str();
  app.add_option("--epochs", opt.epochs, "passes over the training set")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch-size", opt.batch_size, "samples per step (per rank; 1 rank here)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", opt.lr, "learning rate")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--momentum", opt.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--weight-decay", opt.weight_decay, "SGD weight decay (L2)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--schedule", opt.schedule,
                 "learning rate per epoch: cosine (from --lr down towards 0) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))->capture_default_str();
  app.add_option("--seed", opt.seed, "seed of the initial weights and the shuffling")
      ->capture_default_str();
  app.add_option("--train-samples", opt.train_samples,
                 "train on the first N training samples only (0: all), for quick runs")
      ->capture_default_str();
  app.add_option("--metrics", opt.metrics, "write one JSON line per epoch here");
  app.add_option("--trace", opt.trace, "write a Chrome trace (Perfetto) of the phases here");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
