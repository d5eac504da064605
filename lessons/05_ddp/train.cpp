// train: lesson 05's program. Trains a model on Fashion-MNIST with DistributedDataParallel,
// whose missing pieces are yours: one process per device, each on its own share of every
// epoch (your DistributedSampler), gradients averaged bucket by bucket while backward runs
// (your bucket assignment, hook, finalize and rebuild).
//
//   tools/mpirun -np 2 build/solutions/05_ddp/train --model cnn
//   tools/mpirun -np 2 build/solutions/05_ddp/train --model mlp --trace ddp.json --steps 50
//   tools/mpirun -np 2 build/solutions/05_ddp/train --device cuda --backend nccl  (a GPU per rank)
//   build/lessons/05_ddp/train --data synthetic --epochs 1                  (a world of 1)
#include <algorithm>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"

namespace {

using namespace mgpu;
namespace par = mgpu::parallel;

struct DdpFlags {
  double bucket_cap_mb = 25.0;
  bool bucket_cap_given = false;  // PyTorch: a 1 MiB first bucket only when not given
  bool find_unused = false, no_broadcast_buffers = false;
  bool no_sampler = false;    // the pitfall: every rank reads everything in the same order
  bool no_set_epoch = false;  // the pitfall: every epoch repeats the first one's order
  std::string comm_hook = "allreduce";
};

void trace_ddp_step(app::Trace& trace, const par::Reducer& reducer, const par::StepTimeline& t,
                    const std::vector<par::BucketTiming>& buckets, double opt_begin, double opt_end);
void log_rebuild(par::DistributedDataParallel& ddp, std::int64_t step);

int train(const app::Options& opt, const DdpFlags& f) {
  // Step 0) one process per device: this rank's device, its group, a CPU group for the
  // numbers every rank contributes to (loss and accuracy sums, the trace).
  const int rank = dist::rank(), world = dist::world_size();
  const Device device = dist::rank_device(opt.device);
  dist::ProcessGroup& group = dist::init_process_group(opt.backend, device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> cpu_group = dist::new_group("mpi", Device::cpu(), quiet);
  app::Run run(opt, "lesson 05: DistributedDataParallel on " + std::to_string(world) +
                        " rank(s), backend " + group.backend_name(), {device}, cpu_group.get());

  // Step 1) data: every rank reads the whole dataset and trains on its share of it; the
  // test set is split across the ranks and their counts summed.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, world, rank, true,
                                                           opt.seed);
  // --no-distributed-sampler: the same seed on every rank gives every rank the same batches.
  auto train_loader = app::train_loader(data, opt, device, false,
                                        f.no_sampler ? nullptr : sampler);
  auto test_loader = app::test_loader(data, device, 1000, cpu_group.get());

  // Step 2) the model on this rank's device, wrapped: DDP checks that all ranks built the
  // same model and copies rank 0's weights to every rank.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(device);
  par::DDPOptions ddp_options;
  if (f.bucket_cap_given) ddp_options.bucket_cap_mb = f.bucket_cap_mb;
  ddp_options.find_unused_parameters = f.find_unused;
  ddp_options.broadcast_buffers = !f.no_broadcast_buffers;
  par::DistributedDataParallel ddp(model, group, ddp_options);
  if (f.comm_hook == "fp16") ddp.register_comm_hook(par::fp16_compress_hook);
  par::CommTimer comm_timer;  // each bucket's all-reduce, for the trace
  if (run.trace().on()) ddp.reducer().set_comm_timer(&comm_timer);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  const std::int64_t batches = train_loader->num_batches();
  dist::log0("model: ", opt.model, " (", nn::model_summary(opt.model), "), ",
             model->num_parameters(), " parameters; ", optimizer.describe(), ", ", opt.schedule,
             " schedule over ", opt.epochs, " epochs; comm hook: ", f.comm_hook);
  dist::log0(ddp.describe(), f.find_unused ? "" : " (first iteration: one bucket; "
             "rebuilt in gradient-ready order before the second)", "\n", ddp.bucket_summary());
  dist::log0("batch: ", opt.batch_size, " per rank, global ", opt.batch_size * world, " (", world,
             " rank(s)); ", train_loader->num_samples(), " samples and ",
             opt.steps > 0 ? std::min(opt.steps, batches) : batches, " steps per rank per epoch",
             f.no_sampler ? " (no DistributedSampler: every rank sees the same batches!)" : "");

  std::vector<std::int64_t> first_order;  // this rank's sample order in epoch 1
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    // The same learning rate on every rank (as lesson 01: --schedule cosine or constant).
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    // Without this, every epoch would visit the samples in the first epoch's order: the
    // sampler shuffles for the epoch it was told, not the loader's (as in PyTorch).
    if (!f.no_set_epoch) sampler->set_epoch(epoch);
    if (epoch > 0 && !f.no_sampler && sampler->indices() == first_order)
      dist::log0("epoch ", epoch + 1, ": the same sample order as epoch 1 (",
                 f.no_set_epoch ? "--no-set-epoch: " : "", "set_epoch was not called)");
    if (epoch == 0) first_order = sampler->indices();
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
      const double opt_begin = app::now_s();
      optimizer.step();
      if (run.trace().on()) {
        synchronize(device);
        trace_ddp_step(run.trace(), ddp.reducer(), ddp.last_step(), comm_timer.take(), opt_begin,
                       app::now_s());
      }
      if (ddp.last_step().rebuilt_buckets) log_rebuild(ddp, run.epoch_steps() + 1);
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
    }
    run.end_training();
    // Step 7) evaluate with rank 0's BatchNorm statistics on every rank, each rank on its
    // part of the test set; rank 0 reports the sums of every rank.
    ddp.sync_buffers();
    run.end_epoch(app::evaluate(*model, *test_loader, cpu_group.get()));
  }
  return run.finish();
}

// The phases of one DDP step on this rank's rows of the trace, from the timeline DDP kept
// and the comm timer: compute on one track, each bucket's all-reduce on another, named by
// its parameters, so the first step's single bucket and the rebuilt ones show their order.
void trace_ddp_step(app::Trace& trace, const par::Reducer& reducer, const par::StepTimeline& t,
                    const std::vector<par::BucketTiming>& buckets, double opt_begin, double opt_end) {
  trace.span("compute", t.rebuilt_buckets ? "forward (buckets rebuilt)" : "forward",
             t.forward_begin, t.forward_end);
  trace.span("compute", "backward", t.backward_begin, t.backward_end);
  trace.span("compute", "wait for buckets", t.backward_end, t.reduce_end);
  trace.span("compute", "optimizer", opt_begin, opt_end);
  for (const par::BucketTiming& b : buckets) {
    const std::vector<std::size_t>& vars = reducer.bucket_variables(b.bucket);
    std::string name = "all-reduce bucket " + std::to_string(b.bucket) + ":";
    for (std::size_t i = 0; i < vars.size() && i < 3; ++i)
      name += " " + reducer.variables()[vars[i]]->name();
    if (vars.size() > 3) name += " +" + std::to_string(vars.size() - 3);
    trace.span("comm", name, b.launch_s, b.done_s,
               {{"bytes", static_cast<double>(b.bytes)},
                {"parameters", static_cast<double>(vars.size())}});
  }
}

// The buckets DDP rebuilt after the first iteration, and the order that made them.
void log_rebuild(par::DistributedDataParallel& ddp, std::int64_t step) {
  std::string order;
  for (std::size_t v : ddp.reducer().rebuilt_from_order())
    order += " " + ddp.reducer().variables()[v]->name();
  dist::log0("buckets rebuilt before step ", step, "; rank 0's gradients became ready in the order:",
             order, "\n", ddp.bucket_summary());
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";  // as lesson 01, so the two runs compare like for like
  DdpFlags f;
  CLI::App cli{"Lesson 05: train a model on Fashion-MNIST with DistributedDataParallel "
               "(start it with tools/mpirun -np N)."};
  app::FlagSet flags;
  flags.models = {"mlp", "cnn", "mlp-bn", "deep-mlp", "cnn-small"};
  flags.lr_schedule = true;
  flags.backend = true;
  flags.device_help = "cpu, or cuda (rank r uses cuda:<local rank>), or cuda:N";
  app::add_flags(cli, opt, flags);
  CLI::Option* cap = cli.add_option("--bucket-cap-mb", f.bucket_cap_mb,
                                    "cap of every bucket in MiB (not given: 25, and 1 for the first)")
      ->check(app::non_negative_real());
  cli.add_flag("--no-set-epoch", f.no_set_epoch,
               "do not call sampler.set_epoch(e) (a common pitfall: every epoch then repeats "
               "the first epoch's order)");
  cli.add_flag("--find-unused-parameters", f.find_unused,
               "mark parameters that got no gradient ready at the end of backward");
  cli.add_flag("--no-distributed-sampler", f.no_sampler,
               "every rank reads the whole training set in the same order (the classic "
               "mistake, to measure it)");
  cli.add_flag("--no-broadcast-buffers", f.no_broadcast_buffers,
               "do not copy rank 0's buffers (BatchNorm statistics) before each forward");
  cli.add_option("--comm-hook", f.comm_hook, "allreduce or fp16 (compress buckets to f16)")
      ->check(CLI::IsMember({"allreduce", "fp16"}))->capture_default_str();
  // --help prints once, before MPI starts; a bad flag fails every rank the same way.
  CLI11_PARSE(cli, argc, argv);
  f.bucket_cap_given = cap->count() > 0;
  return app::run_distributed(&argc, &argv, [&] { return train(opt, f); });
}
