// train: lesson 02's program. Trains a model with the hand-built DataParallel on the listed
// devices, then reports where the time, the memory and the bytes went.
//
//   build/solutions/02_data_parallel/train --devices cpu:0,cpu:1 --epochs 2
//   build/solutions/02_data_parallel/train --devices cuda:0,cuda:1 --model cnn-small
#include <string>
#include <vector>

#include "data_parallel.h"
#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace l02 = mgpu::lesson02;

// --serialize-python-like: the replicas' forward takes turns as under Python's lock (§6).
struct PythonLike {
  bool on = false;
  double hold_us = 0;  // set in main
};

int train(const app::Options& opt, const PythonLike& python_like) {
  const std::vector<Device> devices = parse_devices(opt.device);
  MGPU_CHECK(!devices.empty(), "--devices: no device in '", opt.device, "'");
  const int k = static_cast<int>(devices.size());
  app::Run run(opt, "lesson 02: DataParallel over " + std::to_string(k) + " device(s)", devices);
  run.add_metric_fields({{"devices", k}});
  run.set_step_track("main thread");

  // The data: batches start on device 0, as model(x.to('cuda:0')) does in PyTorch.
  const app::Data data = app::open_data(opt);
  auto train_loader = app::train_loader(data, opt, devices[0], /*drop_last=*/true);
  auto test_loader = app::test_loader(data, devices[0], opt.batch_size);

  // The model lives on devices[0] before it is wrapped (DataParallel checks it).
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(devices[0]);
  l02::DataParallel dp(model, devices);
  if (python_like.on) dp.serialize_python_like(python_like.hold_us);
  optim::SGD optimizer(model->parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  l02::print_setup(opt, *model, optimizer, devices);
  l02::TraceRows rows(run.trace(), devices);
  dp.record_spans(run.trace().on());
  l02::StepTraffic traffic;
  Tensor last_inputs;

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 1) the next batch, on device 0.
    while (run.next_batch(batch)) {
      dp.times().add("data", 1e3 * run.last_data_wait_s());
      if (run.steps_done() == 1) {  // the first step allocated everything: measure from here
        for (const Device& d : devices) reset_peak_memory(d);
        dp.traffic().reset();
      }
      // Step 2) forward on every device (scatter, broadcast, parallel apply, gather).
      optimizer.zero_grad();
      const Tensor logits = dp.forward(batch.inputs);
      // Step 3) the loss of the whole batch, on device 0.
      double t = app::now_s();
      const double loss = loss_fn.forward(logits, batch.labels).item();
      const Tensor grad = loss_fn.backward();
      rows.phase(dp, "loss", t);
      // Step 4) backward on every device, gradients summed onto device 0.
      dp.backward(grad);
      // Step 5) the update, on device 0 only; the next forward broadcasts it.
      t = app::now_s();
      optimizer.step();
      synchronize(devices[0]);
      rows.phase(dp, "optimizer", t);
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
      if (run.steps_done() == 2) traffic.keep(dp.traffic(), devices);  // one whole step
      last_inputs = batch.inputs;
    }
    run.end_training();
    rows.add(dp.take_spans());
    // Step 6) the test set through DataParallel in evaluation mode; its phases and spans
    // are not part of the training figures.
    const l02::PhaseTimes train_times = dp.times();
    dp.eval();
    const app::EvalResult test =
        app::evaluate([&](const Tensor& x) { return dp.forward(x); }, *test_loader);
    dp.train();
    dp.take_spans();
    dp.times() = train_times;
    run.end_epoch(test);
  }
  l02::print_report(dp, devices, run.steps_done(), traffic);
  if (last_inputs.defined()) l02::batchnorm_check(*model, devices, last_inputs);
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.model = "mlp-bn";
  opt.epochs = 2;
  opt.batch_size = 256;
  opt.lr = 0.05;
  opt.device = "cpu:0,cpu:1";
  CLI::App cli{"Lesson 02: train with a hand-built DataParallel (one process, one thread per device)"};
  app::FlagSet flags;
  flags.models = {"mlp-bn", "cnn-small", "mlp", "cnn"};
  flags.device_list = true;
  flags.device_help = "devices, e.g. cpu:0,cpu:1 or cuda:0,cuda:1 (device 0 first)";
  flags.batch_help = "the TOTAL batch, split across the devices (as nn.DataParallel)";
  app::add_flags(cli, opt, flags);
  PythonLike python_like;
  python_like.hold_us = l02::kPythonCallUs;
  CLI::Option* serialize =
      cli.add_flag("--serialize-python-like", python_like.on,
                   "hold one lock shared by all replicas around each module call of the "
                   "forward, as Python's interpreter lock would (chapter §6); only the timing "
                   "changes");
  cli.add_option("--python-call-us", python_like.hold_us,
                 "microseconds of busy work under that lock per module call")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e6))
      ->needs(serialize);
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_main([&] { return train(opt, python_like); });
}
