// train: lesson 08's program. Trains a model on Fashion-MNIST in fp32, bf16 or fp16 with
// your Linear (task 3), your training step (task 4) and your GradScaler (tasks 1-2), on one
// rank or several (DistributedDataParallel, the library's reference of lesson 05).
//
//   build/solutions/08_mixed_precision/train --model cnn --precision bf16
//   build/solutions/08_mixed_precision/train --precision fp16 --scale-log fp16.scale.jsonl
//   build/solutions/08_mixed_precision/train --precision fp16 --no-loss-scaling   (what underflow costs)
//   tools/mpirun -np 2 build/solutions/08_mixed_precision/train --precision fp16
//   ... --checkpoint-dir /tmp/run --save-every 100, later the same with --resume auto: the
//   library's checkpoints of lesson 07, with GradScaler's state_dict among their extra state
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>

#include "mgpu/amp/train_step.h"
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace l08 = mgpu::lesson08;
namespace par = mgpu::parallel;

int train(const app::Options& opt, const l08::AmpFlags& f) {
  // Step 0) one process per device, as in lesson 05; a CPU group for the reported sums.
  const app::Ranks ranks = app::init_ranks(opt);
  const amp::Precision precision = amp::parse_precision(f.precision);
  app::Run run(opt, std::string("lesson 08: mixed precision (") + amp::precision_name(precision) +
                        ") on " + std::to_string(ranks.world) + " rank(s)", ranks);

  // Step 1) data: each rank its share of every epoch.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, ranks.world,
                                                           ranks.rank, true, opt.seed);
  auto train_loader = app::train_loader(data, opt, ranks.device, false, sampler);
  auto test_loader = app::test_loader(data, ranks.device, 1000, ranks.cpu_group.get());

  // Step 2) the model (nn::Linear: your task 3 in build/lessons/), fp32 parameters (the
  // master weights), under DDP.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(ranks.device);
  par::DistributedDataParallel ddp(model, *ranks.group);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  app::DdpStepTrace ddp_trace(run.trace(), ddp);  // --trace: DDP's phases, the optimizer's
  app::TracedOptimizer traced_optimizer(optimizer, run.trace(), ranks.device);

  // Step 3) the scaler: on for fp16 unless --no-loss-scaling; every rank decides together.
  const amp::GradScalerOptions so = l08::scaler_options(f, precision);
  amp::GradScaler scaler(so, ranks.world > 1 ? ranks.group : nullptr);
  l08::print_setup(opt, *model, precision, so, ranks.world);

  // Step 4) resume (lesson 07's checkpoints, the library's reference): model, optimizer,
  // random streams, the position in the data, and the scaler's state.
  app::Checkpoints checkpoints(
      f.ck, opt, data, run, *ranks.cpu_group,
      app::with_ddp_buckets(l08::checkpoint_hooks(*model, optimizer, scaler), ddp));
  checkpoints.record("precision", f.precision, "--precision");
  checkpoints.resume();

  l08::ScaleLog scale_log(f.scale_log);
  for (int epoch = checkpoints.first_epoch(); epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    checkpoints.start_epoch(epoch, lr, *train_loader);  // mid-epoch after a resume
    l08::EpochScale epoch_scale(scaler);
    data::Batch batch;
    // Step 5) a batch, then your training step: autocast forward, fp32 loss, scaled
    // backward (DDP averages the gradients), unscale and check, step or skip, update.
    while (run.next_batch(batch)) {
      const amp::StepResult r = amp::train_step(ddp, loss_fn, traced_optimizer, scaler,
                                                batch.inputs, batch.labels, precision);
      ddp_trace.record();
      epoch_scale.step(r);
      scale_log.record(checkpoints.progress().global_step + 1, epoch + 1, r.scale, !r.stepped);
      run.step(r.loss, batch.labels.numel(),
               r.logits.defined() ? app::count_correct(r.logits, batch.labels) : -1);
      // Step 6) where the run stands (a skipped step counts: the data moved on), and a
      // checkpoint every --save-every steps, after update() so the scaler's state is whole.
      checkpoints.step_done(epoch);
    }
    run.end_training();
    ddp.sync_buffers();
    epoch_scale.report(run, scaler, epoch);  // the metrics line's loss scale, skipped steps
    run.end_epoch(app::evaluate(*model, *test_loader, ranks.cpu_group.get()));
    checkpoints.epoch_done(epoch);
  }
  scale_log.record(checkpoints.progress().global_step, opt.epochs, scaler.get_scale(), false,
                   /*last=*/true);
  std::ostringstream end_state;
  end_state << std::setprecision(10) << "scaler: scale=" << scaler.get_scale()
            << " growth_tracker=" << scaler.growth_tracker();
  dist::log0(end_state.str());
  // Every rank's fingerprint: the replicas are identical only if every rank skipped the
  // same steps (§5 of the chapter), so a disagreement would show here.
  const int differing = app::log_weights_fingerprint(*model, ranks.cpu_group.get());
  MGPU_CHECK(differing == 0, "the replicas' weights differ after training (", differing,
             " rank(s) differ from rank 0): did the ranks skip different steps?");
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";  // as lessons 01 and 05
  l08::AmpFlags f;
  CLI::App cli{"Lesson 08: train a model on Fashion-MNIST with mixed precision (fp32, bf16, "
               "or fp16 with GradScaler); start it with tools/mpirun -np N for several ranks."};
  app::FlagSet flags;
  flags.lr_schedule = true;
  flags.backend = true;
  app::add_flags(cli, opt, flags);
  l08::add_amp_flags(cli, f);
  MGPU_PARSE_FLAGS(cli, argc, argv);
  if (!app::checkpoint_flags_ok(f.ck)) return 1;
  return app::run_distributed(&argc, &argv, [&] { return train(opt, f); });
}
