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
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "mgpu/amp/autocast.h"
#include "mgpu/app/app.h"
#include "mgpu/data/throttled.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "step_timing.h"
#include "time_cost.h"

namespace {

using namespace mgpu;
namespace l09 = mgpu::lesson09;
using l09::Mark;

struct Options {
  std::optional<double> bucket_cap_mb;  // not given: PyTorch's default (25 MiB, first 1 MiB)
  int accumulate = 1;
  int num_workers = 0, prefetch_factor = 2;
  bool pin_memory = false;
  double storage_latency_us = 0;
  std::string precision = "fp32";
  std::string comm_hook = "allreduce";
  std::int64_t warmup_steps = 5;
  bool no_eval = false;
  std::string breakdown;
};

// The model between two markers: forward and backward are timed from inside DDP's calls.
std::shared_ptr<nn::Sequential> timed_model(const app::Options& opt, const data::Dataset& train,
                                            l09::PhaseClock& clock) {
  auto inner = nn::make_model(opt.model, train.sample_shape(), train.num_classes());
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<l09::ClockMarker>(clock, Mark::count, Mark::backward_end));
  m->add(inner);
  m->add(std::make_shared<l09::ClockMarker>(clock, Mark::count, Mark::backward_begin));
  return m;
}

int train(const app::Options& opt, const Options& o) {
  // Step 0) one process per device; a CPU group for the numbers every rank adds up.
  const Device device = dist::rank_device(opt.device);
  dist::ProcessGroup& group = dist::init_process_group(opt.backend, device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  auto cpu_group = dist::new_group("mpi", Device::cpu(), quiet);
  const int world = group.size(), rank = group.rank();
  app::Run run(opt, "lesson 09: where the time goes, DDP on " + std::to_string(world) +
                        " rank(s), backend " + group.backend_name(), {device}, cpu_group.get());

  // Step 1) the data: each rank its share (DistributedSampler), loaded by the DataLoader's
  // workers into host memory (pinned on request), optionally from slow storage.
  app::Data data = app::open_data(opt);
  if (o.storage_latency_us > 0)
    data.train = std::make_shared<data::ThrottledDataset>(data.train, 1e-6 * o.storage_latency_us);
  auto sampler = std::make_shared<parallel::DistributedSampler>(data.train_samples, world, rank,
                                                                true, opt.seed);
  data::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.num_workers = o.num_workers;
  if (o.num_workers > 0) lo.prefetch_factor = o.prefetch_factor;
  lo.pin_memory = o.pin_memory;
  data::DataLoader loader(data.train, lo, sampler);  // batches stay on the host
  auto test_loader = app::test_loader(data, device, 1000, cpu_group.get());

  // Step 2) the model between two clock markers, wrapped in DDP.
  l09::PhaseClock clock(device);
  nn::manual_seed(opt.seed);
  auto model = timed_model(opt, *data.train, clock);
  model->to(device);
  parallel::DDPOptions ddp_options;
  ddp_options.bucket_cap_mb = o.bucket_cap_mb;
  parallel::DistributedDataParallel ddp(model, group, ddp_options);
  if (o.comm_hook == "fp16") ddp.register_comm_hook(parallel::fp16_compress_hook);
  parallel::CommTimer timer;
  ddp.reducer().set_comm_timer(&timer);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  dist::log0("model: ", opt.model, ", ", model->num_parameters(), " parameters (",
             4.0 * static_cast<double>(model->num_parameters()) / 1048576.0, " MiB of f32 "
             "gradients); ", optimizer.describe(), "; precision ", o.precision, "; comm hook ",
             o.comm_hook, "\n", ddp.describe(), "\nbatch: ", opt.batch_size, " per rank, global ",
             opt.batch_size * world, "; gradients all-reduced every ", o.accumulate,
             " micro-batch(es); DataLoader: ", o.num_workers, " worker(s)",
             o.num_workers > 0 ? ", prefetch_factor " + std::to_string(o.prefetch_factor) : "",
             o.pin_memory ? ", pinned memory" : "",
             o.storage_latency_us > 0 ? ", storage " + std::to_string(o.storage_latency_us) + " us per sample" : "");
  run.add_metric_fields({{"batch_per_rank", static_cast<double>(opt.batch_size)},
                         {"accumulate", o.accumulate},
                         {"num_workers", o.num_workers},
                         {"bucket_cap_mb", o.bucket_cap_mb.value_or(-1)}});

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
      const double end = app::now_s();

      // Step 7) the step taken apart (your task 2), the buckets (task 1 inside it).
      l09::StepRecord r;
      r.step = {clock.at(Mark::step_begin), end};
      r.data_wait = clock.between(Mark::step_begin, Mark::data_ready);
      r.h2d = clock.between(Mark::data_ready, Mark::on_device);
      r.forward = clock.between(Mark::on_device, Mark::forward_end);
      r.backward = clock.between(Mark::backward_begin, Mark::backward_end);
      r.optimizer = clock.between(Mark::reduced, Mark::optimizer_end);
      l09::StepSample s;
      s.epoch = epoch;
      s.step = micro;
      s.batch = batch.labels.numel();
      s.synchronized = sync;
      s.backward_s = r.backward.length();
      for (parallel::BucketTiming b : timer.take()) {
        r.buckets.push_back({b.launch_s, b.done_s});
        run.trace().span("comm", "all-reduce bucket " + std::to_string(b.bucket), b.launch_s,
                         b.done_s, {{"bytes", static_cast<double>(b.bytes)}});
        b.launch_s -= r.backward.begin;  // relative to backward, for the model's workload
        b.done_s -= r.backward.begin;
        s.buckets.push_back(b);
      }
      if (have_phases) {
        try {
          s.phases = l09::step_phases(r);
        } catch (const Error& e) {
          have_phases = false;
          dist::log0("breakdown: off, step_phases failed: ", e.what());
        }
      }
      if (have_phases) breakdown.add(s);
      run.trace().span("compute", "h2d", r.h2d.begin, r.h2d.end);
      run.trace().span("compute", "forward", r.forward.begin, r.forward.end);
      run.trace().span("compute", "backward", r.backward.begin, r.backward.end);
      run.trace().span("compute", "wait for buckets", r.backward.end, clock.at(Mark::reduced));
      run.trace().span("compute", "optimizer", r.optimizer.begin, r.optimizer.end);
      ++micro;
    }
    run.end_training();

    // Step 8) the epoch: the mean breakdown over every rank, then (unless --no-eval) the
    // test set, each rank a part, with rank 0's BatchNorm statistics.
    if (have_phases) {
      const l09::Breakdown::EpochMeans m = breakdown.epoch_means(epoch, *cpu_group);
      const l09::Phases& p = m.mean;
      const app::MetricFields fields = {
          {"data_wait_ms", 1e3 * p.data_wait}, {"h2d_ms", 1e3 * p.h2d},
          {"forward_ms", 1e3 * p.forward}, {"backward_ms", 1e3 * p.backward},
          {"exposed_comm_ms", 1e3 * p.exposed_comm}, {"optimizer_ms", 1e3 * p.optimizer},
          {"other_ms", 1e3 * p.other}, {"measured_step_ms", 1e3 * p.total()},
          {"slowest_rank_data_wait_ms", 1e3 * m.slowest.data_wait},
          {"slowest_rank_exposed_comm_ms", 1e3 * m.slowest.exposed_comm},
          {"measured_steps", static_cast<double>(m.steps)}};
      for (const auto& [name, value] : fields) run.set_metric_field(name, value);
      dist::log0("breakdown (ms per step, mean of ", world, " rank(s), ", m.steps,
                 " measured steps): data wait ", 1e3 * p.data_wait, ", h2d ", 1e3 * p.h2d,
                 ", forward ", 1e3 * p.forward, ", backward ", 1e3 * p.backward,
                 ", exposed comm ", 1e3 * p.exposed_comm, ", optimizer ", 1e3 * p.optimizer,
                 ", other ", 1e3 * p.other, " = ", 1e3 * p.total());
    }
    app::EvalResult test;
    if (!o.no_eval) {
      ddp.sync_buffers();
      test = app::evaluate(*model, *test_loader, cpu_group.get());
    }
    run.end_epoch(test);
  }
  if (!o.breakdown.empty() && have_phases) {
    breakdown.write(o.breakdown, *cpu_group);
    dist::log0("breakdown: ", o.breakdown, " (every step of every rank)");
  }
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.model = "cnn";
  opt.epochs = 1;
  Options o;
  CLI::App cli{"Lesson 09: DDP training with every step of every rank taken apart (start it "
               "with mpirun -np N)."};
  app::FlagSet flags;
  flags.models = {"mlp", "cnn", "deep-mlp", "wide-mlp"};
  flags.lr_schedule = true;
  flags.backend = true;
  app::add_flags(cli, opt, flags);
  cli.add_option("--bucket-cap-mb", o.bucket_cap_mb, "cap of every bucket, MiB (not given: "
                 "25 MiB, the first bucket 1 MiB, as PyTorch)")->check(app::non_negative_real());
  cli.add_option("--accumulate", o.accumulate, "all-reduce every K micro-batches (no_sync "
                 "for the others); the optimizer steps then")->check(app::positive_integer(1024))
      ->capture_default_str();
  cli.add_option("--num-workers", o.num_workers, "DataLoader worker threads (0: load in the "
                 "training loop, as PyTorch's num_workers=0)")->check(app::non_negative_integer(64))
      ->capture_default_str();
  cli.add_option("--prefetch-factor", o.prefetch_factor, "batches each worker loads ahead")
      ->check(app::positive_integer(64))->capture_default_str();
  cli.add_flag("--pin-memory", o.pin_memory, "load batches into pinned host memory");
  cli.add_option("--storage-latency-us", o.storage_latency_us, "slow storage: every sample "
                 "read waits this long")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--precision", o.precision, "fp32, or bf16 (autocast: Linear and Conv2d "
                 "products in bf16 on fp32 weights)")->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cli.add_option("--comm-hook", o.comm_hook, "allreduce, or fp16 (buckets sent as f16)")
      ->check(CLI::IsMember({"allreduce", "fp16"}))->capture_default_str();
  cli.add_option("--warmup-steps", o.warmup_steps, "first steps left out of the breakdown")
      ->check(app::non_negative_integer())->capture_default_str();
  cli.add_flag("--no-eval", o.no_eval, "skip the test set (timing runs); test_acc is then 0");
  cli.add_option("--breakdown", o.breakdown, "rank 0 writes every step of every rank here "
                 "(JSON lines)");
  CLI11_PARSE(cli, argc, argv);
  if (o.num_workers == 0 && cli.count("--prefetch-factor")) {
    std::fprintf(stderr, "error: --prefetch-factor needs --num-workers > 0 (as PyTorch's "
                         "DataLoader: with no workers nothing loads ahead)\n");
    return 1;
  }
  return app::run_distributed(&argc, &argv, [&] { return train(opt, o); });
}
