// train: lesson 01's program. Trains a model on Fashion-MNIST on one device with your
// Linear, your SGD, your training step and your evaluation, and reports accuracy and speed.
//
//   build/solutions/01_single_gpu/train --model mlp
//   build/solutions/01_single_gpu/train --model cnn --device cuda --metrics cnn.jsonl
//   build/lessons/01_single_gpu/train --data synthetic --epochs 1      (your code)
#include "lesson01.h"
#include "mgpu/app/app.h"
#include "mgpu/nn/all.h"

namespace {

using namespace mgpu;
namespace l01 = mgpu::lesson01;

int train(const app::Options& opt) {
  const Device device = Device::parse(opt.device);
  app::Run run(opt, "lesson 01: training on one device", {device});

  // The data: the training set reshuffled every epoch, the test set in order.
  const app::Data data = app::open_data(opt);
  auto train_loader = app::train_loader(data, opt, device);
  auto test_loader = app::test_loader(data, device, 1000);

  // The model and the optimizer: the library's, with your Linear and your SGD in them.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model);
  model->to(device);
  optim::SGD optimizer(model->parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  std::printf("%s; %s, %s schedule over %d epochs\n",
              app::model_line(opt.model, model->num_parameters()).c_str(),
              optimizer.describe().c_str(), opt.schedule.c_str(), opt.epochs);
  std::printf("batch: %lld per rank, global %lld (1 rank); %lld steps per epoch\n",
              static_cast<long long>(opt.batch_size), static_cast<long long>(opt.batch_size),
              static_cast<long long>(train_loader->num_batches()));
  // With --trace, your train_step gets wrappers that record forward, backward and the
  // optimizer step as they run; it sees an ordinary Module and Optimizer.
  app::TracedModule step_model(*model, run.trace(), device);
  app::TracedOptimizer step_optimizer(optimizer, run.trace(), device);

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);  // --schedule: cosine or constant
    optimizer.set_lr(lr);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 1) the next batch, already on the device (or waiting for it).
    while (run.next_batch(batch)) {
      // Steps 2-6) zero the gradients, forward, loss, backward, update: your train_step.
      const l01::StepResult r =
          l01::train_step(step_model, loss_fn, step_optimizer, batch.inputs, batch.labels);
      run.step(r.loss, r.samples, r.correct);
    }
    run.end_training();
    // Step 7) the test set, in evaluation mode: your evaluate.
    const l01::EvalResult test = l01::evaluate(*model, *test_loader);
    run.end_epoch({test.loss, test.accuracy, test.samples});
  }
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";
  CLI::App cli{"Lesson 01: train a model on Fashion-MNIST on one device."};
  app::FlagSet flags;
  flags.models = {"mlp", "cnn", "mlp-bn", "deep-mlp", "cnn-small"};
  flags.lr_schedule = true;
  flags.batch_help = "samples per step (per rank; 1 rank here)";
  app::add_flags(cli, opt, flags);
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_main([&] { return train(opt); });
}
