// train: lesson 05's program. Trains a model on Fashion-MNIST with DistributedDataParallel,
// whose missing pieces are yours: one process per device, each on its own share of every
// epoch (your DistributedSampler), gradients averaged bucket by bucket while backward runs
// (your bucket assignment, hook, finalize and rebuild).
//
//   tools/mpirun -np 2 build/solutions/05_ddp/train --model cnn
//   tools/mpirun -np 2 build/solutions/05_ddp/train --model mlp --trace ddp.json --steps 50
//   tools/mpirun -np 2 build/solutions/05_ddp/train --device cuda --backend nccl  (a GPU per rank)
//   build/lessons/05_ddp/train --data synthetic --epochs 1                  (a world of 1)
#include <string>

#include "mgpu/app/app.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace par = mgpu::parallel;
namespace l05 = mgpu::lesson05;

int train(const app::Options& opt, const l05::DdpFlags& f) {
  // Step 0) one process per device: this rank's device, its group, a CPU group for the
  // numbers every rank contributes to (loss and accuracy sums, the trace).
  const app::Ranks ranks = app::init_ranks(opt);
  const Device device = ranks.device;
  app::Run run(opt, "lesson 05: DistributedDataParallel on " + std::to_string(ranks.world) +
                        " rank(s), backend " + ranks.group->backend_name(), ranks);

  // Step 1) data: every rank reads the whole dataset and trains on its share of it; the
  // test set is split across the ranks and their counts summed.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, ranks.world,
                                                           ranks.rank, true, opt.seed);
  // --no-distributed-sampler: the same seed on every rank gives every rank the same batches.
  auto train_loader = app::train_loader(data, opt, device, false,
                                        f.no_sampler ? nullptr : sampler);
  auto test_loader = app::test_loader(data, device, 1000, ranks.cpu_group.get());

  // Step 2) the model on this rank's device, wrapped: DDP checks that all ranks built the
  // same model and copies rank 0's weights to every rank.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(device);
  par::DistributedDataParallel ddp(model, *ranks.group, l05::ddp_options(f));
  if (f.comm_hook == "fp16") ddp.register_comm_hook(par::fp16_compress_hook);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  // --trace: each step's forward, backward, bucket all-reduces and optimizer step.
  app::DdpStepTrace ddp_trace(run.trace(), ddp);
  app::TracedOptimizer traced_optimizer(optimizer, run.trace(), device);
  l05::print_setup(opt, f, *model, optimizer, ddp, run);
  l05::RepeatedOrderCheck order_check;

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    // The same learning rate on every rank (as lesson 01: --schedule cosine or constant).
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    // Without this, every epoch would visit the samples in the first epoch's order: the
    // sampler shuffles for the epoch it was told, not the loader's (as in PyTorch).
    if (!f.no_set_epoch) sampler->set_epoch(epoch);
    order_check.at_epoch_start(epoch, *sampler, f);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 3) this rank's next batch.
    while (run.next_batch(batch)) {
      // Step 4) forward and loss on this rank's batch.
      optimizer.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      // Step 5) backward: buckets are all-reduced as their gradients become final.
      ddp.backward(loss_fn.backward());
      // Step 6) the same averaged gradients on every rank: the same update everywhere.
      traced_optimizer.step();
      ddp_trace.record();
      if (ddp.last_step().rebuilt_buckets) l05::log_rebuild(ddp, run.epoch_steps() + 1);
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
    }
    run.end_training();
    // Step 7) evaluate with rank 0's BatchNorm statistics on every rank, each rank on its
    // part of the test set; rank 0 reports the sums of every rank.
    ddp.sync_buffers();
    run.end_epoch(app::evaluate(*model, *test_loader, ranks.cpu_group.get()));
  }
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";  // as lesson 01, so the two runs compare like for like
  l05::DdpFlags f;
  CLI::App cli{"Lesson 05: train a model on Fashion-MNIST with DistributedDataParallel "
               "(start it with tools/mpirun -np N)."};
  app::FlagSet flags;
  flags.lr_schedule = true;
  flags.backend = true;
  app::add_flags(cli, opt, flags);
  l05::add_ddp_flags(cli, f);
  // --help prints once, before MPI starts; a bad flag fails every rank the same way.
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(opt, f); });
}
