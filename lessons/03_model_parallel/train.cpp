// train: lesson 03's program. Splits an MLP across the listed devices, trains it with the
// GPipe (or naive) schedule, and shows the pipeline's bubble: the ideal schedule in ticks,
// the measured timeline, busy and idle time per stage, and a Chrome trace.
//
//   build/solutions/03_model_parallel/train --devices cpu:0,cpu:1 --micro 4
//   build/solutions/03_model_parallel/train --devices cpu:0,cpu:1 --sweep
//   build/solutions/03_model_parallel/train --devices cuda:0,cuda:1 --trace pipe.json
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/data/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "pipeline.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace nn = mgpu::nn;
namespace l03 = mgpu::lesson03;

struct Options {
  std::string data = mgpu::data::FashionMNIST::kDefaultDir;
  std::string model = "mlp";
  int epochs = 1;
  std::int64_t batch_size = 256;
  double lr = 0.05;
  double momentum = 0.9;
  std::uint64_t seed = 0;
  std::string devices = "cpu:0,cpu:1";
  std::vector<std::size_t> split;  // empty: balanced by parameters
  int micro = 4;
  std::string schedule = "gpipe";
  std::int64_t steps = 0;
  bool sweep = false;
  std::string metrics, trace;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Deep enough to split four ways: Flatten, then four Linear + ReLU blocks, then the classifier.
std::shared_ptr<nn::Sequential> build_model(const std::string& name, const mgpu::Shape& sample,
                                            std::int64_t classes) {
  MGPU_CHECK(name == "mlp", "--model: lesson 03 splits an MLP; got '", name, "'");
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Flatten>());
  std::int64_t in = mgpu::shape_numel(sample);
  for (std::int64_t width : {512, 512, 256, 256}) {
    m->add(std::make_shared<nn::Linear>(in, width));
    m->add(std::make_shared<nn::ReLU>());
    in = width;
  }
  m->add(std::make_shared<nn::Linear>(in, classes));
  return m;
}

l03::Schedule make_schedule(const std::string& name, int K, int M) {
  if (name == "naive") return l03::naive_schedule(K, M);
  return l03::gpipe_schedule(K, M);
}

std::string describe_stage(const l03::Stage& s, std::int64_t* params) {
  std::ostringstream os;
  *params = 0;
  os << "layers " << s.first_layer << "-" << s.first_layer + s.layers.size() - 1 << " (";
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    os << (i ? ", " : "") << s.layers[i]->describe();
    *params += s.layers[i]->num_parameters();
  }
  os << ")";
  return os.str();
}

struct Averages {
  std::vector<double> busy_ms, idle_ms;
  double span_ms = 0, bubble = 0;
  int steps = 0;
  void add(const l03::StepStats& s) {
    busy_ms.resize(s.busy_us.size(), 0.0);
    idle_ms.resize(s.idle_us.size(), 0.0);
    for (std::size_t k = 0; k < s.busy_us.size(); ++k) {
      busy_ms[k] += s.busy_us[k] / 1000.0;
      idle_ms[k] += s.idle_us[k] / 1000.0;
    }
    span_ms += s.span_us / 1000.0;
    bubble += s.bubble_fraction();
    ++steps;
  }
};

// The pipeline's central trade-off, measured: more micro-batches shrink the bubble.
int run_sweep(l03::Pipeline& pipe, mgpu::data::DataLoader& loader, int K, std::int64_t batch) {
  std::printf("\nbubble sweep (batch %lld, %d stages, 6 steps each, the first not counted):\n",
              static_cast<long long>(batch), K);
  std::printf("  %-8s %4s %12s %12s %10s\n", "schedule", "M", "ideal", "measured", "step ms");
  std::vector<std::pair<std::string, int>> runs = {{"naive", 1}};
  for (int M : {1, 2, 4, 8, 16, 32})
    if (M <= batch) runs.push_back({"gpipe", M});
  loader.start_epoch(0);
  mgpu::data::Batch b;
  for (const auto& [name, M] : runs) {
    const l03::Schedule s = make_schedule(name, K, M);
    Averages avg;
    for (int i = 0; i < 6; ++i) {
      if (!loader.next(b)) {  // the epoch ran out: start another
        loader.start_epoch(1);
        loader.next(b);
      }
      const l03::StepStats st = pipe.train_step(b.inputs, b.labels, s);
      if (i > 0) avg.add(st);  // the first pays for allocations
    }
    std::printf("  %-8s %4d %12.3f %12.3f %10.2f\n", name.c_str(), M, s.idle_fraction(),
                avg.bubble / avg.steps, avg.span_ms / avg.steps);
  }
  std::printf("ideal: the schedule's idle slots on its own clock ((K-1)/(M+K-1) for GPipe, "
              "(K-1)/K for naive); measured: idle time / (K x step time)\n");
  return 0;
}

int run(const Options& opt) {
  const std::vector<Device> devices = mgpu::parse_devices(opt.devices);
  const int K = static_cast<int>(devices.size());
  MGPU_CHECK(K >= 1, "--devices: no device in '", opt.devices, "'");
  std::printf("device mapping:\n%s\n", mgpu::describe_mapping(devices).c_str());

  auto train_set = mgpu::data::open_dataset(opt.data, mgpu::data::Split::train, opt.seed);
  auto test_set = mgpu::data::open_dataset(opt.data, mgpu::data::Split::test, opt.seed);
  std::printf("data: %s\n", train_set->describe().c_str());

  nn::manual_seed(opt.seed);
  auto model = build_model(opt.model, train_set->sample_shape(), train_set->num_classes());
  const std::vector<std::size_t> cuts =
      opt.split.empty() ? l03::balanced_boundaries(*model, K) : opt.split;
  l03::Pipeline pipe(l03::split_model(*model, cuts, devices));
  for (std::size_t k = 0; k < pipe.stages().size(); ++k) {
    std::int64_t params = 0;
    const std::string what = describe_stage(pipe.stages()[k], &params);
    std::printf("stage %zu on %s: %s, %lld parameters\n", k, devices[k].str().c_str(), what.c_str(),
                static_cast<long long>(params));
  }
  mgpu::optim::SGD optimizer(model->parameters(), {opt.lr, opt.momentum, 0.0});

  mgpu::data::DataLoaderOptions train_opts;
  train_opts.batch_size = opt.batch_size;
  train_opts.seed = opt.seed;
  train_opts.drop_last = true;
  train_opts.device = devices.front();  // micro-batches enter at stage 0
  mgpu::data::DataLoader train_loader(train_set, train_opts);
  if (opt.sweep) return run_sweep(pipe, train_loader, K, opt.batch_size);

  const l03::Schedule schedule = make_schedule(opt.schedule, K, opt.micro);
  std::printf("\nschedule '%s', K = %d stages, M = %d micro-batches of ~%lld rows "
              "(batch %lld); on its own clock:\n%s",
              schedule.name.c_str(), K, opt.micro,
              static_cast<long long>(opt.batch_size / opt.micro),
              static_cast<long long>(opt.batch_size), schedule.draw().c_str());
  std::printf("idle fraction of the schedule: %.3f (GPipe's (K-1)/(M+K-1) = %.3f); activations "
              "held per stage: up to %d micro-batches (1F1B would hold %d on stage 0)\n\n",
              schedule.idle_fraction(), static_cast<double>(K - 1) / (opt.micro + K - 1),
              l03::max_in_flight(schedule, 0),
              l03::max_in_flight(l03::one_f_one_b_schedule(K, opt.micro), 0));

  mgpu::data::DataLoaderOptions test_opts = train_opts;
  test_opts.shuffle = false;
  test_opts.drop_last = false;
  mgpu::data::DataLoader test_loader(test_set, test_opts);
  std::ofstream metrics;
  if (!opt.metrics.empty()) {
    metrics.open(opt.metrics);
    MGPU_CHECK(metrics.good(), "--metrics: cannot write ", opt.metrics);
  }

  const bool tty = isatty(fileno(stdout));
  const double start = now_s();
  std::vector<l03::StepStats> traced;
  std::vector<double> offsets;
  l03::StepStats last;
  Averages avg;
  std::int64_t total_samples = 0;
  double train_loss = 0, test_acc = 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    train_loader.start_epoch(epoch);
    mgpu::data::Batch batch;
    const double epoch_start = now_s();
    double loss_sum = 0;
    std::int64_t seen = 0, steps = 0;
    const std::int64_t planned = opt.steps > 0 ? std::min(opt.steps, train_loader.num_batches())
                                               : train_loader.num_batches();
    while (steps < planned && train_loader.next(batch)) {
      if (epoch == 0 && steps == 1)
        for (const Device& d : devices) mgpu::reset_peak_memory(d);
      const double step_start = now_s();
      // Step 1) forward and backward of every micro-batch, as the schedule orders them;
      // the gradients accumulate in the parameters, on each stage's device.
      const l03::StepStats st = pipe.train_step(batch.inputs, batch.labels, schedule);
      // Step 2) one update per batch, every parameter on its own device.
      optimizer.step();
      if (!opt.trace.empty() && traced.size() < 50) {
        traced.push_back(st);
        offsets.push_back((step_start - start) * 1e6);
      }
      if (epoch > 0 || steps > 0) avg.add(st);  // the first step pays for allocations
      last = st;
      loss_sum += st.loss * static_cast<double>(batch.labels.numel());
      seen += batch.labels.numel();
      ++steps;
      if (tty && steps % 10 == 0)
        std::printf("\repoch %d/%d  step %lld/%lld  loss %.4f", epoch + 1, opt.epochs,
                    static_cast<long long>(steps), static_cast<long long>(planned),
                    loss_sum / static_cast<double>(seen)),
            std::fflush(stdout);
    }
    if (tty) std::printf("\r%70s\r", "");
    const double epoch_time = now_s() - epoch_start;

    // Evaluation: the naive forward, stage after stage, in eval mode.
    model->eval();
    test_loader.start_epoch(0);
    double test_loss = 0;
    std::int64_t correct = 0, test_seen = 0;
    nn::CrossEntropyLoss loss;
    while (test_loader.next(batch)) {
      const Tensor logits = pipe.forward(batch.inputs);
      const Tensor labels = batch.labels.to(logits.device());
      const std::int64_t n = labels.numel();
      test_loss += loss.forward(logits, labels).item() * static_cast<double>(n);
      const std::vector<std::int64_t> pred = mgpu::argmax_last(logits).to_vector<std::int64_t>();
      const std::vector<std::int64_t> want = labels.to_vector<std::int64_t>();
      for (std::size_t i = 0; i < pred.size(); ++i) correct += pred[i] == want[i];
      test_seen += n;
    }
    model->train();
    train_loss = loss_sum / static_cast<double>(seen);
    test_acc = static_cast<double>(correct) / static_cast<double>(test_seen);
    total_samples += seen;
    const double sps = static_cast<double>(seen) / epoch_time;
    std::printf("epoch %d: train_loss=%.4f test_loss=%.4f test_acc=%.4f samples_per_s=%.0f step_ms=%.2f\n",
                epoch + 1, train_loss, test_loss / static_cast<double>(test_seen), test_acc, sps,
                1000.0 * epoch_time / static_cast<double>(steps));
    if (metrics.is_open())
      metrics << nlohmann::json{{"epoch", epoch + 1}, {"train_loss", train_loss},
                                {"test_loss", test_loss / static_cast<double>(test_seen)},
                                {"test_acc", test_acc}, {"samples_per_s", sps},
                                {"step_ms", 1000.0 * epoch_time / static_cast<double>(steps)},
                                {"world_size", 1}, {"stages", K}, {"micro_batches", opt.micro}}
                     .dump()
              << "\n" << std::flush;
  }
  const double elapsed = now_s() - start;

  std::printf("\nthe last step, measured (F/B: forward/backward most of a column, f/b: part of it, "
              ". idle):\n%s", l03::draw_timeline(last, K).c_str());
  if (avg.steps > 0) {
    std::printf("per stage, averaged over %d steps:", avg.steps);
    for (int k = 0; k < K; ++k)
      std::printf("  stage %d busy %.2f ms idle %.2f ms", k, avg.busy_ms[k] / avg.steps,
                  avg.idle_ms[k] / avg.steps);
    std::printf("\nbubble: measured %.3f of %d x %.2f ms; the schedule's own clock says %.3f\n",
                avg.bubble / avg.steps, K, avg.span_ms / avg.steps, schedule.idle_fraction());
  }
  std::printf("peak memory per device (after the first step):");
  for (const Device& d : devices)
    std::printf("  %s %.2f MiB", d.str().c_str(),
                static_cast<double>(mgpu::memory_stats(d).peak_allocated) / (1024.0 * 1024.0));
  std::printf("\n");
  if (!opt.trace.empty()) {
    std::ofstream out(opt.trace);
    MGPU_CHECK(out.good(), "--trace: cannot write ", opt.trace);
    out << l03::chrome_trace(traced, offsets, devices, schedule.name) << "\n";
    std::printf("trace: %s, %zu steps (open it in https://ui.perfetto.dev)\n", opt.trace.c_str(),
                traced.size());
  }
  std::printf("final: test_acc=%.4f train_loss=%.4f samples_per_s=%.0f time_s=%.1f\n", test_acc,
              train_loss, static_cast<double>(total_samples) / elapsed, elapsed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Lesson 03: model parallelism, a model split across devices with a GPipe pipeline"};
  app.add_option("--data", opt.data, "Fashion-MNIST folder, or 'synthetic'");
  app.add_option("--model", opt.model, "mlp (five Linear layers, split across the devices)");
  app.add_option("--epochs", opt.epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", opt.batch_size, "rows per step, cut into --micro micro-batches")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", opt.lr, "learning rate");
  app.add_option("--momentum", opt.momentum, "SGD momentum");
  app.add_option("--seed", opt.seed, "seed of the weights and the shuffling");
  app.add_option("--device,--devices", opt.devices, "one device per stage, e.g. cpu:0,cpu:1 or cuda:0,cuda:1");
  app.add_option("--split", opt.split, "layer indices where stages 1.. begin, e.g. 5,9 (default: "
                 "balanced by parameters)")->delimiter(',');
  app.add_option("--micro", opt.micro, "micro-batches per batch (M)")->check(CLI::PositiveNumber);
  app.add_option("--schedule", opt.schedule, "gpipe or naive")->check(CLI::IsMember({"gpipe", "naive"}));
  app.add_option("--steps", opt.steps, "stop each epoch after this many steps (0: whole epochs)");
  app.add_flag("--sweep", opt.sweep, "measure the bubble for naive and GPipe with M = 1..32, then exit");
  app.add_option("--metrics", opt.metrics, "write one JSON line per epoch here");
  app.add_option("--trace", opt.trace, "write a Chrome trace (Perfetto) of up to 50 steps here");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
