// train: lesson 07's program. Lesson 05's DDP training (the library's DDP) with checkpoints
// made by your pieces: capture_training_state and the writer every --save-every steps, the
// atomic save on rank 0; at --resume, every rank reads the file with your reader and
// restore_training_state puts it back. Kill it with kill -9 at any moment and resume: the run ends
// with the same weights and the same `final:` numbers as one never interrupted (CPU).
//
//   tools/mpirun -np 2 build/solutions/07_checkpointing/train --data synthetic
//       --epochs 3 --train-samples 6000 --checkpoint-dir /tmp/run --save-every 25
//   (one command line; kill -9 a rank mid-run, then the same command with --resume auto)
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"

namespace {

using namespace mgpu;
int train(const app::Options& opt, const app::CheckpointFlags& ck) {
  // Step 0) one process per device, as in lesson 05.
  const app::Ranks ranks = app::init_ranks(opt);
  app::Run run(opt, "lesson 07: DDP training with checkpoints on " + std::to_string(ranks.world) +
                        " rank(s)", ranks);

  // Step 1) data, model, DDP, optimizer: built from the flags, the same on a restart.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<parallel::DistributedSampler>(data.train_samples, ranks.world,
                                                                ranks.rank, true, opt.seed);
  auto train_loader = app::train_loader(data, opt, ranks.device, false, sampler);
  auto test_loader = app::test_loader(data, ranks.device, 1000, ranks.cpu_group.get());
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(ranks.device);
  parallel::DistributedDataParallel ddp(model, *ranks.group);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  app::DdpStepTrace ddp_trace(run.trace(), ddp);  // --trace: DDP's phases, the optimizer's
  app::TracedOptimizer traced_optimizer(optimizer, run.trace(), ranks.device);
  dist::log0(app::model_line(opt.model, model->num_parameters()));

  // Step 2) checkpoints made by your pieces: capture_training_state; io::save_checkpoint
  // with your writer and your atomic save on rank 0; at --resume every rank reads the file
  // with your reader and restore_training_state puts model, optimizer and random streams
  // back; the data continues where it stopped.
  app::CheckpointHooks hooks;
  hooks.capture = [&](const io::TrainingProgress& p) {
    return io::capture_training_state(*model, optimizer, p);
  };
  hooks.restore = [&](const io::TrainingState& st, const std::string& path) {
    return io::restore_training_state(st, *model, optimizer, path);
  };
  // DDP's rebuilt buckets travel in the checkpoint too (extra.ddp, the library's addition):
  // on 3 or more ranks they decide the order the all-reduce sums in.
  app::Checkpoints checkpoints(ck, opt, data, run, *ranks.cpu_group,
                               app::with_ddp_buckets(std::move(hooks), ddp));
  checkpoints.resume();

  for (int epoch = checkpoints.first_epoch(); epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    checkpoints.start_epoch(epoch, lr, *train_loader);  // mid-epoch after a resume
    data::Batch batch;
    // Step 3) lesson 05's step.
    while (run.next_batch(batch)) {
      optimizer.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      ddp.backward(loss_fn.backward());
      traced_optimizer.step();
      ddp_trace.record();
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
      // Step 4) where the run stands, and a checkpoint every --save-every steps.
      checkpoints.step_done(epoch);
    }
    run.end_training();
    ddp.sync_buffers();
    run.end_epoch(app::evaluate(*model, *test_loader, ranks.cpu_group.get()));
    checkpoints.epoch_done(epoch);  // --save-every 0: a checkpoint at every epoch's end
  }
  app::log_weights_fingerprint(*model);
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";  // as lessons 01 and 05
  app::CheckpointFlags ck;
  CLI::App cli{"Lesson 07: lesson 05's DDP training with checkpoints; kill it and resume "
               "(start it with tools/mpirun -np N)."};
  app::FlagSet flags;
  flags.lr_schedule = true;
  flags.backend = true;
  app::add_flags(cli, opt, flags);
  app::add_checkpoint_flags(cli, ck);
  MGPU_PARSE_FLAGS(cli, argc, argv);
  if (!app::checkpoint_flags_ok(ck)) return 1;
  return app::run_distributed(&argc, &argv, [&] { return train(opt, ck); });
}
