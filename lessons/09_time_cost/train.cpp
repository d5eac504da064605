// train: lesson 09's program. Lesson 05's DDP training (the library's reference) with every
// step of every rank taken apart by your step_phases (task 2): data wait, copy to the
// device, forward, backward, exposed communication (task 1), optimizer, other. The epoch's
// means go to the metrics line, every step of every rank to --breakdown, the phases and
// each bucket's all-reduce to --trace.
//
//   tools/mpirun -np 2 build/solutions/09_time_cost/train --model cnn --epochs 1 --steps 50
//   ... --bucket-cap-mb 5 --model wide-mlp      a model whose gradients fill several buckets
//   ... --accumulate 4                           no_sync: all-reduce every 4th micro-batch
//   ... --num-workers 2 --storage-latency-us 300 DataLoader workers against slow storage
//   ... --breakdown steps.jsonl --trace t.json   every step of every rank; the timeline
#include <memory>
#include <optional>
#include <string>

#include "mgpu/nn/autocast.h"
#include "mgpu/app/app.h"
#include "mgpu/data/throttled.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "mgpu/perf/time_cost.h"
#include "step_timing.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace l09 = mgpu::lesson09;
using l09::Mark;

int train(const app::Options& opt, const l09::Flags& o) {
  // Step 0) one process per device; a CPU group for the numbers every rank adds up.
  const app::Ranks ranks = app::init_ranks(opt);
  const Device device = ranks.device;
  dist::ProcessGroup& cpu_group = *ranks.cpu_group;
  app::Run run(opt, "lesson 09: where the time goes, DDP on " + std::to_string(ranks.world) +
                        " rank(s), backend " + ranks.group->backend_name(), ranks);

  // Step 1) the data: each rank its share (DistributedSampler), loaded by the DataLoader's
  // workers into host memory (pinned on request), optionally from slow storage.
  app::Data data = app::open_data(opt);
  if (o.storage_latency_us > 0)
    data.train = std::make_shared<data::ThrottledDataset>(data.train, 1e-6 * o.storage_latency_us);
  auto sampler = std::make_shared<parallel::DistributedSampler>(data.train_samples, ranks.world,
                                                                ranks.rank, true, opt.seed);
  data::DataLoader loader(data.train, l09::loader_options(opt, o), sampler);  // on the host
  auto test_loader = app::test_loader(data, device, 1000, &cpu_group);

  // Step 2) the model between two clock markers, wrapped in DDP; each bucket's all-reduce
  // timed, for the breakdown and the trace.
  l09::PhaseClock clock(device);
  nn::manual_seed(opt.seed);
  auto model = l09::timed_model(opt, *data.train, clock);
  model->to(device);
  parallel::DDPOptions ddp_options;
  ddp_options.bucket_cap_mb = o.bucket_cap_mb;
  parallel::DistributedDataParallel ddp(model, *ranks.group, ddp_options);
  if (o.comm_hook == "fp16") ddp.register_comm_hook(parallel::fp16_compress_hook);
  app::DdpStepTrace ddp_trace(run.trace(), ddp, /*time_buckets=*/true);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  l09::print_setup(opt, o, *model, optimizer, ddp, run);

  l09::Breakdown breakdown(o.warmup_steps);
  bool have_phases = true;  // your step_phases (task 2) may not be written yet
  std::int64_t micro = 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    loader.start_epoch(epoch);
    run.start_epoch(epoch, lr, loader);
    data::Batch batch;
    for (;;) {
      // Step 3) the next batch, then onto the device.
      clock.begin_step();
      if (!run.next_batch(batch)) break;
      clock.mark(Mark::data_ready);
      const Tensor x = batch.inputs.to(device), y = batch.labels.to(device);
      clock.mark(Mark::on_device);
      // Step 4) forward and loss. Inside no_sync, this micro-batch's backward only adds to
      // the gradients; the K-th synchronises their sum.
      const bool sync = (micro + 1) % o.accumulate == 0 || run.epoch_steps() + 1 == run.planned_steps();
      if (micro % o.accumulate == 0) optimizer.zero_grad();
      std::optional<parallel::DistributedDataParallel::NoSyncGuard> no_sync;
      if (!sync) no_sync.emplace(ddp);
      std::optional<amp::Autocast> autocast;
      if (o.precision == "bf16") autocast.emplace(DType::bf16);
      const Tensor logits = ddp.forward(x);
      autocast.reset();
      const double loss = loss_fn.forward(logits, y).item();
      clock.mark(Mark::forward_end);
      // Step 5) backward: the gradient hooks launch each full bucket's all-reduce.
      Tensor grad = loss_fn.backward();
      if (o.accumulate > 1) scale_(grad, 1.0 / o.accumulate);  // the mean over K micro-batches
      ddp.backward(grad);
      no_sync.reset();
      clock.mark(Mark::reduced);
      // Step 6) the update, once per K micro-batches.
      if (sync) optimizer.step();
      clock.mark(Mark::optimizer_end);
      run.step(loss, batch.labels.numel(), app::count_correct(logits, y));
      clock.end_step();

      // Step 7) the step taken apart by your step_phases (task 2; task 1 inside it), from
      // the clock's marks and each bucket's all-reduce (on the trace too).
      l09::MeasuredStep m = l09::measure_step(clock, ddp_trace, ddp.last_step(), run.trace(),
                                              epoch, micro, batch.labels.numel(), sync);
      if (have_phases) {
        try {
          m.sample.phases = perf::step_phases(m.record);
          breakdown.add(m.sample);
        } catch (const Error& e) {
          have_phases = false;
          dist::log0("breakdown: off, step_phases failed: ", e.what());
        }
      }
      ++micro;
    }
    run.end_training();

    // Step 8) the epoch: the mean breakdown over every rank, then (unless --no-eval) the
    // test set, each rank a part, with rank 0's BatchNorm statistics.
    if (have_phases) l09::report_breakdown(breakdown.epoch_means(epoch, cpu_group), run, ranks.world);
    app::EvalResult test;
    if (!o.no_eval) {
      ddp.sync_buffers();
      test = app::evaluate(*model, *test_loader, &cpu_group);
    }
    run.end_epoch(test);
  }
  if (!o.breakdown.empty() && have_phases) {
    breakdown.write(o.breakdown, cpu_group);
    dist::log0("breakdown: ", o.breakdown, " (every step of every rank)");
  }
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.model = "cnn";
  opt.epochs = 1;
  l09::Flags o;
  CLI::App cli{"Lesson 09: DDP training with every step of every rank taken apart (start it "
               "with mpirun -np N)."};
  app::FlagSet flags;
  flags.models = {"mlp", "cnn", "deep-mlp", "wide-mlp"};
  flags.lr_schedule = true;
  flags.backend = true;
  app::add_flags(cli, opt, flags);
  l09::add_time_cost_flags(cli, o);
  MGPU_PARSE_FLAGS(cli, argc, argv);
  if (!l09::flags_ok(cli, o)) return 1;
  return app::run_distributed(&argc, &argv, [&] { return train(opt, o); });
}
