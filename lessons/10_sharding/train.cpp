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

int train(const app::Options& opt, const l10::ShardFlags& f) {
  // Step 0) one process per device, as in lesson 05; a CPU group for the reported sums.
  const app::Ranks ranks = app::init_ranks(opt);
  const Device device = ranks.device;
  const int world = ranks.world;
  const std::string mode = f.zero == 0 ? "DDP" : "ZeRO stage " + std::to_string(f.zero);
  app::Run run(opt, "lesson 10: " + mode + ", " + f.precision + ", on " + std::to_string(world) +
                        " rank(s), backend " + ranks.group->backend_name(), ranks);

  // Step 1) data: each rank its share of every epoch.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, world, ranks.rank,
                                                           true, opt.seed);
  auto train_loader = app::train_loader(data, opt, device, false, sampler);
  auto test_loader = app::test_loader(data, device, 1000, ranks.cpu_group.get());
  // What the model, its gradients and its optimizer will hold is counted from here.
  const double baseline = static_cast<double>(memory_stats(device).allocated);

  // Step 2) the model on this rank's device, wrapped: DDP replicates, ZeRO shards.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(device);
  const std::int64_t parameters = model->num_parameters();
  const DType compute = l10::compute_dtype(f.precision);
  std::unique_ptr<par::DistributedDataParallel> ddp;
  std::unique_ptr<par::ShardedDataParallel> sdp;
  par::CommLog ddp_comm;  // DDP's bucket all-reduces, to count their bytes
  if (f.zero == 0) {
    ddp = std::make_unique<par::DistributedDataParallel>(model, *ranks.group, l10::ddp_options(f));
    ddp->reducer().set_comm_log(&ddp_comm);
  } else {
    sdp = std::make_unique<par::ShardedDataParallel>(model, *ranks.group, l10::sharding_options(f));
  }
  nn::Module& wrapped = ddp ? static_cast<nn::Module&>(*ddp) : static_cast<nn::Module&>(*sdp);
  // AdamW over what this rank steps: every parameter under DDP, its shards under ZeRO.
  optim::AdamW optimizer(wrapped.parameters(),
                         {opt.lr, opt.betas.first, opt.betas.second, 1e-8, opt.weight_decay});
  // fp16 needs loss scaling, and with sharded gradients every rank must skip together.
  amp::GradScalerOptions so;
  so.enabled = compute == DType::f16;
  amp::GradScaler scaler(so, world > 1 ? ranks.group : nullptr);
  nn::CrossEntropyLoss loss_fn;
  // The formula for this run (DDP's collectives counted per bucket, rebuilt after step 1).
  auto formula = [&] {
    return ddp ? l10::ddp_formula(parameters, f.bucket_view, world, compute,
                                  ddp->reducer().num_buckets())
               : l10::sharded_formula(*sdp);
  };
  dist::log0(app::model_line(opt.model, parameters), "; ", optimizer.describe(), "\n",
             ddp ? ddp->describe() : sdp->describe() + "\n" + sdp->unit_summary());
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
    const l10::StepSummary s = recorder.summary(*ranks.cpu_group);
    for (const auto& [name, value] : l10::metric_fields(s, formula(), f.zero, world))
      run.set_metric_field(name, value);
    dist::log0(l10::describe_summary(s, formula()));
    // The plain model under DDP; at stage 3 only the wrapper can gather the parameters.
    run.end_epoch(app::evaluate(ddp ? static_cast<nn::Module&>(*model) : wrapped, *test_loader,
                                ranks.cpu_group.get()));
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
  l10::ShardFlags f;
  CLI::App cli{"Lesson 10: train a model on Fashion-MNIST with AdamW, its state sharded across "
               "the ranks (ZeRO stage 1, 2 or 3) or replicated (DDP); start it with "
               "tools/mpirun -np N."};
  app::FlagSet flags;
  flags.models = {"wide-mlp", "cnn", "mlp", "deep-mlp", "cnn-small", "mlp-bn"};
  flags.lr_schedule = true;
  flags.backend = true;
  flags.adamw = true;
  app::add_flags(cli, opt, flags);
  l10::add_shard_flags(cli, f);
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(opt, f); });
}
