// train: lesson 02's program. Trains a small model with the hand-built DataParallel on the
// listed devices, then reports where the time, the memory and the bytes went.
//
//   build/solutions/02_data_parallel/train --devices cpu:0,cpu:1 --epochs 2
//   build/solutions/02_data_parallel/train --devices cuda:0,cuda:1 --model cnn
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "data_parallel.h"
#include "mgpu/allocator.h"
#include "mgpu/data/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace nn = mgpu::nn;
namespace l02 = mgpu::lesson02;

struct Options {
  std::string data = mgpu::data::FashionMNIST::kDefaultDir;
  std::string model = "mlp";
  int epochs = 2;
  std::int64_t batch_size = 256;
  double lr = 0.05;
  double momentum = 0.9;
  std::uint64_t seed = 0;
  std::string devices = "cpu:0,cpu:1";
  std::int64_t steps = 0;  // 0: whole epochs
  std::string metrics, trace;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double now_us() { return now_s() * 1e6; }

// The lesson's models. Both have BatchNorm, so the run can show where its statistics
// come from under DataParallel.
std::shared_ptr<nn::Sequential> build_model(const std::string& name, const mgpu::Shape& sample,
                                            std::int64_t classes) {
  auto m = std::make_shared<nn::Sequential>();
  if (name == "mlp") {
    const std::int64_t in = mgpu::shape_numel(sample);
    m->add(std::make_shared<nn::Flatten>());
    m->add(std::make_shared<nn::Linear>(in, 256));
    m->add(std::make_shared<nn::BatchNorm1d>(256));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::Linear>(256, 128));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::Linear>(128, classes));
  } else if (name == "cnn") {
    MGPU_CHECK(sample.size() == 3, "--model cnn needs image samples [C, H, W], got ",
               mgpu::shape_str(sample));
    m->add(std::make_shared<nn::Conv2d>(sample[0], 16, 3, 1, 1));
    m->add(std::make_shared<nn::BatchNorm2d>(16));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::MaxPool2d>(2));
    m->add(std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1));
    m->add(std::make_shared<nn::BatchNorm2d>(32));
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::MaxPool2d>(2));
    m->add(std::make_shared<nn::Flatten>());
    m->add(std::make_shared<nn::Linear>(32 * (sample[1] / 4) * (sample[2] / 4), classes));
  } else {
    MGPU_FAIL("--model must be mlp or cnn, got '", name, "'");
  }
  return m;
}

std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const std::vector<std::int64_t> pred = mgpu::argmax_last(logits).to_vector<std::int64_t>();
  const std::vector<std::int64_t> want = labels.to_vector<std::int64_t>();
  std::int64_t n = 0;
  for (std::size_t i = 0; i < pred.size(); ++i) n += pred[i] == want[i];
  return n;
}

struct EvalResult {
  double loss = 0, acc = 0;
};

EvalResult evaluate(l02::DataParallel& dp, mgpu::data::DataLoader& loader) {
  dp.eval();
  loader.start_epoch(0);
  mgpu::data::Batch batch;
  double loss_sum = 0;
  std::int64_t correct = 0, seen = 0;
  nn::CrossEntropyLoss loss;
  while (loader.next(batch)) {
    const Tensor logits = dp.forward(batch.inputs);
    const std::int64_t n = batch.labels.numel();
    loss_sum += loss.forward(logits, batch.labels).item() * static_cast<double>(n);
    correct += count_correct(logits, batch.labels);
    seen += n;
  }
  dp.train();
  return {loss_sum / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen)};
}

// The seeds' point about BatchNorm, measured: one more training forward through
// DataParallel moves the running mean exactly as device 0's chunk alone would.
void batchnorm_check(nn::Module& model, const std::vector<Device>& devices, const Tensor& x) {
  std::string bn_name;
  for (auto& [name, b] : model.named_buffers())
    if (name.size() > 12 && name.compare(name.size() - 12, 12, "running_mean") == 0) {
      bn_name = name;
      break;
    }
  if (bn_name.empty() || devices.size() < 2) return;
  auto probe = model.clone();  // on devices[0], same weights and statistics
  auto chunk0 = model.clone();
  auto full = model.clone();
  probe->train();
  chunk0->train();
  full->train();
  l02::DataParallel dp(probe, devices);
  dp.forward(x);
  const std::vector<std::int64_t> sizes = dp.last_chunk_sizes();
  chunk0->forward(x.slice(0, sizes[0]));
  full->forward(x);
  auto dist = [&](nn::Module& other) {
    const std::vector<double> a = probe->buffer(bn_name).to_vector<double>();
    const std::vector<double> b = other.buffer(bn_name).to_vector<double>();
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  };
  std::printf("batchnorm: after one DataParallel forward of %lld rows, '%s' differs by %.3g from "
              "device 0's chunk alone (%lld rows) and by %.3g from the full batch\n",
              static_cast<long long>(x.size(0)), bn_name.c_str(), dist(*chunk0),
              static_cast<long long>(sizes[0]), dist(*full));
  for (const auto& r : dp.replicas()) r->clear_saved();
  chunk0->clear_saved();
  full->clear_saved();
}

void write_trace(const std::string& path, const std::vector<l02::Span>& spans,
                 const std::vector<Device>& devices) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", "DataParallel (lesson 02)"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0},
                    {"args", {{"name", "main thread: phases"}}}});
  for (std::size_t i = 0; i < devices.size(); ++i)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", i + 1},
                      {"args", {{"name", "replica " + std::to_string(i) + " on " + devices[i].str()}}}});
  const double origin = spans.empty() ? 0 : spans.front().start_us;
  for (const l02::Span& s : spans)
    events.push_back({{"name", s.name}, {"ph", "X"}, {"pid", 0}, {"tid", s.track},
                      {"ts", s.start_us - origin}, {"dur", s.end_us - s.start_us}});
  std::ofstream out(path);
  MGPU_CHECK(out.good(), "--trace: cannot write ", path);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
}

int run(const Options& opt) {
  const std::vector<Device> devices = mgpu::parse_devices(opt.devices);
  MGPU_CHECK(!devices.empty(), "--devices: no device in '", opt.devices, "'");
  const int k = static_cast<int>(devices.size());
  std::printf("device mapping:\n%s\n", mgpu::describe_mapping(devices).c_str());

  auto train_set = mgpu::data::open_dataset(opt.data, mgpu::data::Split::train, opt.seed);
  auto test_set = mgpu::data::open_dataset(opt.data, mgpu::data::Split::test, opt.seed);
  std::printf("data: %s\n", train_set->describe().c_str());

  nn::manual_seed(opt.seed);
  auto model = build_model(opt.model, train_set->sample_shape(), train_set->num_classes());
  // The model must live on devices[0] before it is wrapped (DataParallel checks it).
  model->to(devices[0]);
  l02::DataParallel dp(model, devices);
  mgpu::optim::SGD optimizer(model->parameters(), {opt.lr, opt.momentum, 0.0});

  // The batch size is the total batch: DataParallel splits it.
  const std::vector<std::int64_t> chunks = l02::chunk_sizes(opt.batch_size, k);
  std::string split;
  for (std::size_t i = 0; i < chunks.size(); ++i)
    split += (i ? " + " : "") + std::to_string(chunks[i]) + " on " + devices[i].str();
  std::printf("model: %s, %lld parameters; %s\n", opt.model.c_str(),
              static_cast<long long>(model->num_parameters()), optimizer.describe().c_str());
  std::printf("batch: %lld in total (global batch %lld) = %s\n",
              static_cast<long long>(opt.batch_size), static_cast<long long>(opt.batch_size),
              split.c_str());
  if (static_cast<int>(chunks.size()) < k)
    std::printf("note: a batch of %lld on %d devices makes only %zu chunks; %d device(s) idle\n",
                static_cast<long long>(opt.batch_size), k, chunks.size(),
                k - static_cast<int>(chunks.size()));

  mgpu::data::DataLoaderOptions train_opts;
  train_opts.batch_size = opt.batch_size;
  train_opts.seed = opt.seed;
  train_opts.drop_last = true;
  train_opts.device = devices[0];  // inputs start on device 0, as model(x.to('cuda:0'))
  mgpu::data::DataLoader train_loader(train_set, train_opts);
  mgpu::data::DataLoaderOptions test_opts = train_opts;
  test_opts.shuffle = false;
  test_opts.drop_last = false;
  mgpu::data::DataLoader test_loader(test_set, test_opts);

  std::ofstream metrics;
  if (!opt.metrics.empty()) {
    metrics.open(opt.metrics);
    MGPU_CHECK(metrics.good(), "--metrics: cannot write ", opt.metrics);
  }
  dp.record_spans(!opt.trace.empty());
  std::vector<l02::Span> spans;
  const bool tty = isatty(fileno(stdout));
  const double start = now_s();
  std::int64_t total_samples = 0, total_steps = 0;
  double last_train_loss = 0, last_test_acc = 0;
  Tensor last_inputs;
  nn::CrossEntropyLoss loss;
  std::string step_traffic;
  std::size_t step_bytes = 0, step_bytes_dev0 = 0;

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    train_loader.start_epoch(epoch);
    mgpu::data::Batch batch;
    double loss_sum = 0, epoch_start = now_s();
    std::int64_t correct = 0, seen = 0, steps = 0;
    const std::int64_t planned = opt.steps > 0 ? std::min(opt.steps, train_loader.num_batches())
                                               : train_loader.num_batches();
    while (steps < planned) {
      double t = now_us();
      if (!train_loader.next(batch)) break;
      auto phase = [&](const char* name) {
        const double end = now_us();
        dp.times().add(name, (end - t) / 1000.0);
        if (!opt.trace.empty()) spans.push_back({name, 0, t, end});
        t = end;
      };
      phase("data");
      if (epoch == 0 && steps == 1) {  // the first step allocated everything: measure from here
        for (const Device& d : devices) mgpu::reset_peak_memory(d);
        dp.traffic().reset();
      }
      // Step 1) forward on every device (scatter, broadcast, parallel apply, gather).
      optimizer.zero_grad();
      const Tensor logits = dp.forward(batch.inputs);
      t = now_us();
      // Step 2) the loss of the whole batch, on device 0.
      const Tensor value = loss.forward(logits, batch.labels);
      const Tensor grad = loss.backward();
      const double batch_loss = value.item();
      phase("loss");
      // Step 3) backward on every device, gradients summed onto device 0.
      dp.backward(grad);
      t = now_us();
      // Step 4) the update, on device 0 only; the next forward broadcasts it.
      optimizer.step();
      mgpu::synchronize(devices[0]);
      phase("optimizer");

      const std::int64_t n = batch.labels.numel();
      loss_sum += batch_loss * static_cast<double>(n);
      correct += count_correct(logits, batch.labels);
      seen += n;
      ++steps;
      last_inputs = batch.inputs;
      if (epoch == 0 && steps == 2) {  // one whole step counted: keep its traffic
        step_traffic = dp.traffic().report(devices);
        step_bytes = dp.traffic().total();
        step_bytes_dev0 = dp.traffic().bytes_through(devices[0]);
      }
      if (tty && steps % 10 == 0)
        std::printf("\repoch %d/%d  step %lld/%lld  loss %.4f", epoch + 1, opt.epochs,
                    static_cast<long long>(steps), static_cast<long long>(planned),
                    loss_sum / static_cast<double>(seen)),
            std::fflush(stdout);
    }
    if (tty) std::printf("\r%70s\r", "");
    const double epoch_time = now_s() - epoch_start;
    for (l02::Span& s : dp.take_spans()) spans.push_back(std::move(s));
    const l02::PhaseTimes train_times = dp.times();
    const EvalResult test = evaluate(dp, test_loader);
    dp.take_spans();  // evaluation is not part of the training figures
    dp.times() = train_times;
    total_samples += seen;
    total_steps += steps;
    last_train_loss = loss_sum / static_cast<double>(seen);
    last_test_acc = test.acc;
    const double sps = static_cast<double>(seen) / epoch_time;
    std::printf("epoch %d: train_loss=%.4f train_acc=%.4f test_loss=%.4f test_acc=%.4f "
                "samples_per_s=%.0f step_ms=%.2f\n",
                epoch + 1, last_train_loss, static_cast<double>(correct) / static_cast<double>(seen),
                test.loss, test.acc, sps, 1000.0 * epoch_time / static_cast<double>(steps));
    if (metrics.is_open())
      metrics << nlohmann::json{{"epoch", epoch + 1}, {"train_loss", last_train_loss},
                                {"train_acc", static_cast<double>(correct) / static_cast<double>(seen)},
                                {"test_loss", test.loss}, {"test_acc", test.acc},
                                {"samples_per_s", sps},
                                {"step_ms", 1000.0 * epoch_time / static_cast<double>(steps)},
                                {"world_size", 1}, {"devices", k}}
                     .dump()
              << "\n" << std::flush;
  }
  const double elapsed = now_s() - start;

  // Where the time went (training and evaluation forwards both count in the dp phases).
  std::printf("time per training step by phase (ms, averaged over %lld steps):\n ",
              static_cast<long long>(total_steps));
  for (const char* p : {"data", "scatter", "broadcast", "forward", "gather", "loss", "grad_scatter",
                        "backward", "reduce", "optimizer"})
    std::printf(" %s %.2f", p, dp.times().ms[p] / static_cast<double>(std::max<std::int64_t>(1, total_steps)));
  std::printf("\n");
  std::printf("peak memory per device (after the first step):");
  for (const Device& d : devices)
    std::printf("  %s %s", d.str().c_str(), l02::format_bytes(mgpu::memory_stats(d).peak_allocated).c_str());
  std::printf("\n");
  if (step_bytes > 0)
    std::printf("bytes moved in one training step (%s in all, %.0f%% of them to or from %s):\n%s\n",
                l02::format_bytes(step_bytes).c_str(),
                100.0 * static_cast<double>(step_bytes_dev0) / static_cast<double>(step_bytes),
                devices[0].str().c_str(), step_traffic.c_str());
  if (last_inputs.defined()) batchnorm_check(*model, devices, last_inputs);
  if (!opt.trace.empty()) {
    write_trace(opt.trace, spans, devices);
    std::printf("trace: %s (open it in https://ui.perfetto.dev)\n", opt.trace.c_str());
  }
  std::printf("final: test_acc=%.4f train_loss=%.4f samples_per_s=%.0f time_s=%.1f\n",
              last_test_acc, last_train_loss, static_cast<double>(total_samples) / elapsed, elapsed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Lesson 02: train with a hand-built DataParallel (one process, one thread per device)"};
  app.add_option("--data", opt.data, "Fashion-MNIST folder, or 'synthetic'");
  app.add_option("--model", opt.model, "mlp or cnn (both with BatchNorm)")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--epochs", opt.epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", opt.batch_size,
                 "the TOTAL batch, split across the devices (as nn.DataParallel)")->check(CLI::PositiveNumber);
  app.add_option("--lr", opt.lr, "learning rate");
  app.add_option("--momentum", opt.momentum, "SGD momentum");
  app.add_option("--seed", opt.seed, "seed of the weights and the shuffling");
  app.add_option("--device,--devices", opt.devices, "devices, e.g. cpu:0,cpu:1 or cuda:0,cuda:1 (device 0 first)");
  app.add_option("--steps", opt.steps, "stop each epoch after this many steps (0: whole epochs)");
  app.add_option("--metrics", opt.metrics, "write one JSON line per epoch here");
  app.add_option("--trace", opt.trace, "write a Chrome trace (Perfetto) of the phases and replicas here");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
