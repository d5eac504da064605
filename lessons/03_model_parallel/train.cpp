// train: lesson 03's program. Splits an MLP across the listed devices, trains it with the
// GPipe, 1F1B (or naive) schedule, and shows the pipeline's bubble and memory: the ideal
// schedule in ticks, the measured timeline, busy and idle time per stage, the live
// micro-batches and peak memory per stage, and a Chrome trace.
//
//   build/solutions/03_model_parallel/train --devices cpu:0,cpu:1 --micro 4
//   build/solutions/03_model_parallel/train --devices cpu:0,cpu:1,cpu:2,cpu:3 --schedule 1f1b
//   build/solutions/03_model_parallel/train --devices cpu:0,cpu:1,cpu:2,cpu:3 --sweep
//   build/solutions/03_model_parallel/train --devices cuda:0,cuda:1 --trace pipe.json
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "pipeline.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace l03 = mgpu::lesson03;

struct PipelineFlags {
  std::vector<std::size_t> split;  // empty: balanced by parameters
  int micro = 4;
  std::string schedule = "gpipe";
  bool sweep = false;
  std::string sweep_jsonl;  // where --sweep writes its JSON lines, if set
};

int train(const app::Options& opt, const PipelineFlags& f) {
  const std::vector<Device> devices = parse_devices(opt.device);
  const int K = static_cast<int>(devices.size());
  MGPU_CHECK(K >= 1, "--devices: no device in '", opt.device, "'");
  app::Run run(opt, "lesson 03: a model split into " + std::to_string(K) + " stage(s)", devices);
  run.add_metric_fields({{"stages", K}, {"micro_batches", f.micro}});

  // The data: batches enter the pipeline at stage 0.
  const app::Data data = app::open_data(opt);
  auto train_loader = app::train_loader(data, opt, devices.front(), /*drop_last=*/true);
  auto test_loader = app::test_loader(data, devices.front(), opt.batch_size);

  // The model, cut into stages, each moved to its device.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  const std::vector<std::size_t> cuts =
      f.split.empty() ? l03::balanced_boundaries(*model, K) : f.split;
  l03::Pipeline pipe(l03::split_model(*model, cuts, devices));
  optim::SGD optimizer(model->parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  l03::print_setup(opt, *model, optimizer, pipe, devices);
  if (f.sweep) return l03::run_sweep(pipe, *train_loader, K, opt.batch_size, f.sweep_jsonl);
  const l03::Schedule schedule = l03::make_schedule(f.schedule, K, f.micro);
  l03::print_schedule(schedule, opt.batch_size);
  run.trace().name_process("pipeline (" + schedule.name + ")");
  run.set_step_track("main thread");
  l03::StageAverages average;
  l03::StepStats last;

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 1) the next batch, on stage 0's device.
    while (run.next_batch(batch)) {
      const double step_start = app::now_s();
      // Step 2) forward and backward of every micro-batch, as the schedule orders them;
      // the gradients accumulate in the parameters, on each stage's device.
      const l03::StepStats st = pipe.train_step(batch.inputs, batch.labels, schedule);
      // Step 3) one update per batch, every parameter on its own device.
      optimizer.step();
      if (run.trace().on() && run.steps_done() < 50)  // the trace keeps 50 steps
        l03::trace_step(run.trace(), st, step_start, devices, run.steps_done());
      if (run.steps_done() > 0) average.add(st);  // the first step pays for allocations
      last = st;
      run.step(st.loss, batch.labels.numel());
    }
    run.end_training();
    // Step 4) evaluation: the naive forward, stage after stage, in eval mode.
    model->eval();
    const app::EvalResult test =
        app::evaluate([&](const Tensor& x) { return pipe.forward(x); }, *test_loader);
    model->train();
    run.end_epoch(test);
  }
  l03::print_report(last, average, schedule, devices);
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.model = "deep-mlp";
  opt.epochs = 1;
  opt.batch_size = 256;
  opt.lr = 0.05;
  opt.device = "cpu:0,cpu:1";
  PipelineFlags f;
  CLI::App cli{"Lesson 03: model parallelism, a model split across devices with a GPipe or 1F1B "
               "pipeline"};
  app::FlagSet flags;
  flags.models = {"deep-mlp", "mlp"};
  flags.device_list = true;
  flags.device_help = "one device per stage, e.g. cpu:0,cpu:1 or cuda:0,cuda:1";
  flags.batch_help = "rows per step, cut into --micro micro-batches";
  app::add_flags(cli, opt, flags);
  cli.add_option("--split", f.split, "layer indices where stages 1.. begin, e.g. 5,9 (default: "
                 "balanced by parameters)")->delimiter(',');
  cli.add_option("--micro", f.micro, "micro-batches per batch (M)")
      ->check(app::positive_integer())->capture_default_str();
  cli.add_option("--schedule", f.schedule, "gpipe, 1f1b or naive")
      ->check(CLI::IsMember({"gpipe", "1f1b", "naive"}))->capture_default_str();
  cli.add_flag("--sweep", f.sweep, "measure GPipe against 1F1B (bubble, live micro-batches, peak "
               "memory per stage) for M = 4, 8, 16 micro-batches of batch/16 rows, then exit");
  cli.add_option("--sweep-jsonl", f.sweep_jsonl, "--sweep also writes one JSON line per M here "
                 "(tools/plot sweep reads it)");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_main([&] { return train(opt, f); });
}
