// train: lesson 10's program. Trains a model on Fashion-MNIST with AdamW, its training state
// sharded across the ranks at ZeRO stage --zero 1, 2 or 3 (your flat layout, all-gather,
// gradient reduction and unit cycle), or replicated by the library's DDP (--zero 0), and
// reports per rank the memory it keeps and its peak against the formula, the step time,
// and the bytes each rank sends per step.
//
//   tools/mpirun -np 4 build/solutions/10_sharding/train --model wide-mlp --zero 3 --epochs 1 --steps 20
//   tools/mpirun -np 2 build/solutions/10_sharding/train --model cnn --zero 2 --precision bf16
//   tools/mpirun -np 2 build/solutions/10_sharding/train --zero 3 --trace zero3.json --steps 10
//   build/lessons/10_sharding/train --data synthetic --epochs 1 --zero 3        (a world of 1)
#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/amp/all.h"
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/parallel/all.h"
#include "sharding_report.h"

namespace {

using namespace mgpu;
namespace par = mgpu::parallel;
namespace l10 = mgpu::lesson10;

struct ShardFlags {
  int zero = 3;                   // 0: DDP; 1-3: ZeRO stage
  std::string precision = "fp32";
  double unit_cap_mb = 0;         // 0: one unit per layer with parameters
  bool no_prefetch = false;
  bool bucket_view = false;       // DDP's gradient_as_bucket_view
};

DType compute_dtype(const std::string& precision) {
  return precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
}

int train(const app::Options& opt, const ShardFlags& f) {
  // Step 0) one process per device, as in lesson 05; a CPU group for the reported sums.
  const int world = dist::world_size();
  const Device device = dist::rank_device(opt.device);
  dist::ProcessGroup& group = dist::init_process_group(opt.backend, device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> cpu_group = dist::new_group("mpi", Device::cpu(), quiet);
  const std::string mode = f.zero == 0 ? "DDP" : "ZeRO stage " + std::to_string(f.zero);
  app::Run run(opt, "lesson 10: " + mode + ", " + f.precision + ", on " + std::to_string(world) +
                        " rank(s), backend " + group.backend_name(), {device}, cpu_group.get());

  // Step 1) data: each rank its share of every epoch.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, world,
                                                           dist::rank(), true, opt.seed);
  auto train_loader = app::train_loader(data, opt, device, false, sampler);
  auto test_loader = app::test_loader(data, device, 1000, cpu_group.get());
  // What the model, its gradients and its optimizer will hold is counted from here.
  const double baseline = static_cast<double>(memory_stats(device).allocated);

  // Step 2) the model on this rank's device, wrapped: DDP replicates, ZeRO shards.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(device);
  const std::int64_t parameters = model->num_parameters();
  const DType compute = compute_dtype(f.precision);
  std::unique_ptr<par::DistributedDataParallel> ddp;
  std::unique_ptr<par::ShardedDataParallel> sdp;
  par::CommTimer ddp_comm;  // DDP's bucket all-reduces, to count their bytes
  if (f.zero == 0) {
    par::DDPOptions o;
    o.gradient_as_bucket_view = f.bucket_view;
    ddp = std::make_unique<par::DistributedDataParallel>(model, group, o);
    ddp->reducer().set_comm_timer(&ddp_comm);
  } else {
    par::ShardingOptions o;
    o.stage = f.zero;
    o.compute_dtype = compute;
    o.prefetch = !f.no_prefetch;
    o.unit_cap_bytes = f.unit_cap_mb >= 1e12 ? std::numeric_limits<std::size_t>::max()
                                             : static_cast<std::size_t>(f.unit_cap_mb * 1048576.0);
    sdp = std::make_unique<par::ShardedDataParallel>(model, group, o);
  }
  nn::Module& wrapped = ddp ? static_cast<nn::Module&>(*ddp) : static_cast<nn::Module&>(*sdp);
  // AdamW over what this rank steps: every parameter under DDP, its shards under ZeRO.
  optim::AdamW optimizer(wrapped.parameters(), {opt.lr, 0.9, 0.999, 1e-8, opt.weight_decay});
  // fp16 needs loss scaling, and with sharded gradients every rank must skip together.
  amp::GradScalerOptions so;
  so.enabled = compute == DType::f16;
  amp::GradScaler scaler(so, world > 1 ? &group : nullptr);
  nn::CrossEntropyLoss loss_fn;
  // The formula for this run (DDP's collectives counted per bucket, rebuilt after step 1).
  auto formula = [&] {
    return ddp ? l10::ddp_formula(parameters, f.bucket_view, world, compute,
                                  ddp->reducer().num_buckets())
               : l10::sharded_formula(*sdp);
  };
  dist::log0("model: ", opt.model, " (", nn::model_summary(opt.model), "), ", parameters,
             " parameters; ", optimizer.describe(), "; batch ", opt.batch_size, " per rank, global ",
             opt.batch_size * world);
  dist::log0(ddp ? ddp->describe() : sdp->describe() + "\n" + sdp->unit_summary());
  dist::log0(l10::describe_formula(formula()));

  l10::StepRecorder recorder(run.trace());
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 3) this rank's next batch.
    while (run.next_batch(batch)) {
      reset_peak_memory(device);
      const double t0 = app::now_s();
      // Step 4) forward: ZeRO units gather what they need; DDP under autocast for 16 bits.
      optimizer.zero_grad();
      Tensor logits;
      {
        amp::Autocast region(compute == DType::f32 ? DType::bf16 : compute,
                             /*enabled=*/ddp != nullptr && compute != DType::f32);
        logits = wrapped.forward(batch.inputs);
      }
      const double loss = loss_fn.forward(logits, batch.labels).item();
      const double t1 = app::now_s();
      // Step 5) backward: gradients reduced unit by unit (bucket by bucket) as they are final.
      wrapped.backward(scaler.scale(loss_fn.backward()));
      const double t2 = app::now_s();
      // Step 6) AdamW on this rank's state: all of it under DDP, its shards under ZeRO.
      scaler.step(optimizer);
      scaler.update();
      synchronize(device);
      const double t3 = app::now_s();
      // Step 7) what this step held and sent. The loop's own tensors (this batch and its
      // logits) are no part of the model's state: left out of what it keeps.
      const MemoryStats m = memory_stats(device);
      const double loop_bytes = static_cast<double>(batch.inputs.nbytes() + batch.labels.nbytes() +
                                                    logits.nbytes());
      std::vector<l10::Collective> sent =
          ddp ? l10::ddp_collectives(ddp_comm.take()) : l10::sharded_collectives(sdp->take_comm_log());
      recorder.record(t0, t1, t2, t3, static_cast<double>(m.allocated) - baseline - loop_bytes,
                      static_cast<double>(m.peak_allocated) - baseline, sent, world);
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
    }
    run.end_training();
    // Step 8) evaluate with rank 0's BatchNorm statistics on every rank.
    if (ddp) ddp->sync_buffers();
    else sdp->sync_buffers();
    const l10::StepSummary s = recorder.summary(*cpu_group);
    for (const auto& [name, value] : l10::metric_fields(s, formula(), f.zero, world))
      run.set_metric_field(name, value);
    dist::log0(l10::describe_summary(s, formula()));
    // The plain model under DDP; at stage 3 only the wrapper can gather the parameters.
    run.end_epoch(app::evaluate(ddp ? static_cast<nn::Module&>(*model) : wrapped, *test_loader,
                                cpu_group.get()));
  }
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.model = "wide-mlp";
  opt.lr = 1e-3;            // AdamW's default
  opt.weight_decay = 1e-2;  // AdamW's default (decoupled)
  opt.epochs = 1;
  ShardFlags f;
  CLI::App cli{"Lesson 10: train a model on Fashion-MNIST with AdamW, its state sharded across "
               "the ranks (ZeRO stage 1, 2 or 3) or replicated (DDP); start it with "
               "tools/mpirun -np N."};
  app::FlagSet flags;
  flags.models = {"wide-mlp", "cnn", "mlp", "deep-mlp", "cnn-small", "mlp-bn"};
  flags.lr_schedule = true;
  flags.backend = true;
  flags.device_help = "cpu, or cuda (rank r uses cuda:<local rank>), or cuda:N";
  app::add_flags(cli, opt, flags);
  cli.add_option("--zero", f.zero, "0: DDP (everything on every rank); 1: optimizer state "
                 "sharded; 2: + gradients; 3: + parameters (fully sharded)")
      ->check(CLI::Range(0, 3))->capture_default_str();
  cli.add_option("--precision", f.precision, "fp32, bf16 or fp16: the dtype the layers compute "
                 "and the gradients travel in (master weights and AdamW stay fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  cli.add_option("--unit-cap-mb", f.unit_cap_mb, "layers grouped into units of at least this "
                 "many MiB of fp32 parameters (0: a unit per layer; 1e12: the whole model)")
      ->check(app::non_negative_real())->capture_default_str();
  cli.add_flag("--no-prefetch", f.no_prefetch,
               "start a unit's all-gather only when the unit is reached");
  cli.add_flag("--gradient-as-bucket-view", f.bucket_view,
               "--zero 0 only: DDP's gradients are views of its buckets (no separate copy)");
  CLI11_PARSE(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(opt, f); });
}
