// train: lesson 06's program. Trains a model with BatchNorm on Fashion-MNIST under DDP (the
// library's, lesson 05's reference) on every rank. With --sync-bn your
// convert_sync_batchnorm turns its BatchNorms into your SyncBatchNorm first, so that they
// normalise with the statistics of the world's batch instead of the rank's own.
// After each epoch the test set is evaluated twice: in eval mode (the running statistics)
// and in train mode (each batch of --batch-size per rank normalised with its own
// statistics: the rank's, or with --sync-bn the world's), and the gap is printed.
//
//   tools/mpirun -np 4 build/solutions/06_sync_batchnorm/train --model cnn-small --batch-size 8
//   tools/mpirun -np 4 build/solutions/06_sync_batchnorm/train --model cnn-small --batch-size 8 --sync-bn
//   tools/mpirun -np 2 build/solutions/06_sync_batchnorm/train --sync-bn --trace t.json --steps 50
//   build/lessons/06_sync_batchnorm/train --data synthetic --epochs 1 --sync-bn   (a world of 1)
#include <memory>
#include <string>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace par = mgpu::parallel;
namespace l06 = mgpu::lesson06;

int train(const app::Options& opt, bool sync_bn, bool train_mode_eval) {
  // Step 0) one process per device, as in lesson 05; a CPU group for the reported sums.
  const app::Ranks ranks = app::init_ranks(opt);
  const Device device = ranks.device;
  dist::ProcessGroup& cpu_group = *ranks.cpu_group;
  app::Run run(opt, "lesson 06: DDP with " + std::string(sync_bn ? "SyncBatchNorm" : "BatchNorm") +
                        " on " + std::to_string(ranks.world) + " rank(s), backend " +
                        ranks.group->backend_name(), ranks);

  // Step 1) data: each rank trains on its share (DistributedSampler); the test set is split
  // over the ranks, in batches of 1000 (eval mode) and of --batch-size (train mode).
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, ranks.world,
                                                           ranks.rank, true, opt.seed);
  auto train_loader = app::train_loader(data, opt, device, false, sampler);
  auto test_loader = app::test_loader(data, device, 1000, &cpu_group);
  auto batch_test_loader = app::test_loader(data, device, opt.batch_size, &cpu_group);
  if (sync_bn && train_mode_eval) l06::check_equal_batches(*batch_test_loader, cpu_group);

  // Step 2) the model; with --sync-bn its BatchNorms become SyncBatchNorms (before DDP,
  // which registers hooks on the parameters it finds); then DDP.
  nn::manual_seed(opt.seed);
  std::shared_ptr<nn::Module> model =
      nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(device);
  const std::string batchnorms = l06::batchnorm_line(*model, opt.model, sync_bn);
  if (sync_bn) {
    model = par::convert_sync_batchnorm(model);
    l06::trace_sync_steps(*model, run.trace());  // each synchronised step on track "syncbn"
  }
  par::DistributedDataParallel ddp(model, *ranks.group);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  app::DdpStepTrace ddp_trace(run.trace(), ddp);  // --trace: DDP's phases, the optimizer's
  app::TracedOptimizer traced_optimizer(optimizer, run.trace(), device);
  dist::log0(app::model_line(opt.model, model->num_parameters()), "; ", optimizer.describe(), ", ", opt.schedule,
             " schedule over ", opt.epochs, " epochs\n", batchnorms);
  const std::int64_t stats_samples = sync_bn ? opt.batch_size * ranks.world : opt.batch_size;
  run.set_batch_note("BatchNorm statistics over " + std::to_string(stats_samples) + " samples");

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 3) this rank's next batch.
    while (run.next_batch(batch)) {
      // Step 4) forward: with --sync-bn each SyncBatchNorm waits for one all_gather.
      optimizer.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      // Step 5) backward: each SyncBatchNorm waits for one all_reduce; DDP's buckets are
      // all-reduced as their gradients become final.
      ddp.backward(loss_fn.backward());
      // Step 6) the same averaged gradients on every rank.
      traced_optimizer.step();
      ddp_trace.record();
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
    }
    run.end_training();
    // Step 7) the test set in train mode (batch statistics, as in training) and in eval
    // mode (rank 0's running statistics on every rank); the epoch line reports eval mode.
    ddp.sync_buffers();
    const app::EvalResult eval_mode = app::evaluate(*model, *test_loader, &cpu_group);
    if (train_mode_eval) {
      const app::EvalResult batch_mode =
          l06::evaluate_in_train_mode(*model, *batch_test_loader, cpu_group);
      dist::log0("  BatchNorm test accuracy: train mode (statistics of ", stats_samples,
                 " samples) ", l06::pct(batch_mode.accuracy), ", eval mode (running statistics) ",
                 l06::pct(eval_mode.accuracy), ", gap ",
                 l06::pct(batch_mode.accuracy - eval_mode.accuracy));
    }
    run.end_epoch(eval_mode);
  }
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.model = "cnn-small";
  opt.schedule = "cosine";
  bool sync_bn = false, no_train_mode_eval = false;
  CLI::App cli{"Lesson 06: train a BatchNorm model on Fashion-MNIST under DDP, with or without "
               "SyncBatchNorm (start it with tools/mpirun -np N)."};
  app::FlagSet flags;
  flags.models = {"cnn-small", "cnn", "mlp-bn"};
  flags.lr_schedule = true;
  flags.backend = true;
  app::add_flags(cli, opt, flags);
  cli.add_flag("--sync-bn", sync_bn,
               "convert every BatchNorm to SyncBatchNorm (your convert_sync_batchnorm)");
  cli.add_flag("--no-train-mode-eval", no_train_mode_eval,
               "skip the test pass in train mode (batch statistics) after each epoch");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv,
                              [&] { return train(opt, sync_bn, !no_train_mode_eval); });
}
