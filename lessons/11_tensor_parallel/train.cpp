// train: lesson 11's program. Trains an MLP on Fashion-MNIST with 2-D parallelism: each
// group of --tp consecutive ranks shares every Megatron MLP block of the model (your
// column- and row-parallel Linear), and the world / tp such groups are data parallel
// (the library's DDP, lesson 05's reference) over groups of their own.
//
//   tools/mpirun -np 2 build/solutions/11_tensor_parallel/train --tp 2     (tensor parallel only)
//   tools/mpirun -np 4 build/solutions/11_tensor_parallel/train --tp 2     (2 x 2: TP in pairs, DP across)
//   tools/mpirun -np 4 build/solutions/11_tensor_parallel/train --tp 1     (data parallel only)
//   build/lessons/11_tensor_parallel/train --data synthetic --epochs 1    (a world of 1)
#include <algorithm>
#include <memory>
#include <string>

#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "mgpu/parallel/tp/tensor_parallel.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace par = mgpu::parallel;
namespace l11 = mgpu::lesson11;  // the program's set-up and report (train_report.h)

int train(const app::Options& opt, int tp) {
  // Step 0) one process per device; the grid: tensor-parallel groups of tp consecutive
  // ranks, data-parallel groups across them; a CPU group over the world for the run's sums.
  const Device device = dist::rank_device(opt.device);
  std::shared_ptr<dist::ProcessGroup> cpu_group = app::quiet_cpu_group();
  const l11::Grid grid = l11::make_grid(tp, opt.backend, device);
  const int world = dist::world_size(), dp = world / tp;
  app::Run run(opt, "lesson 11: tensor parallelism, " + std::to_string(world) + " rank(s) as tp " +
                        std::to_string(tp) + " x dp " + std::to_string(dp) + ", backend " +
                        grid.tp->backend_name(), {device}, cpu_group.get());
  run.set_data_parallel_size(dp);
  run.add_metric_fields({{"tp", tp}, {"dp", dp}});
  l11::log_grid(grid, tp, dp);

  // Step 1) data: the ranks of a tensor-parallel group read the same batches (they share
  // one replica of the model); the data-parallel groups split the epoch (DistributedSampler
  // over dp replicas) and the test set.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, dp,
                                                           grid.me.dp_rank, true, opt.seed);
  auto train_loader = app::train_loader(data, opt, device, false, sampler);
  auto test_loader = app::test_loader(data, device, 1000, grid.dp_cpu.get());

  // Step 2) the model, built whole from the seed on every rank and cut: each Linear, ReLU,
  // Linear becomes a Megatron MLP block over the tensor-parallel group. Then DDP over the
  // data-parallel group (ranks holding the same shard).
  const double before_model = static_cast<double>(memory_stats(device).allocated);
  nn::manual_seed(opt.seed);
  auto full = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  full->to(device);
  const std::int64_t full_params = full->num_parameters();
  const std::int64_t formula_params = par::tp::parameters_per_rank(*full, tp, grid.me.tp_rank);
  std::shared_ptr<nn::Sequential> model = par::tp::tensor_parallelize(*full, *grid.tp);
  full.reset();  // the shards are copies: the full model goes
  const double model_bytes = static_cast<double>(memory_stats(device).allocated) - before_model;
  par::DistributedDataParallel ddp(model, *grid.dp);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  app::DdpStepTrace ddp_trace(run.trace(), ddp);  // --trace: DDP's phases, the optimizer's
  app::TracedOptimizer traced_optimizer(optimizer, run.trace(), device);
  l11::print_setup(opt, *model, tp, full_params, formula_params, model_bytes);

  std::int64_t tp_collectives = 0, steps = 0;
  double peak_step_bytes = 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 3) this replica's next batch (the same on every rank of the tp group).
    while (run.next_batch(batch)) {
      const std::int64_t tp_before = grid.tp->collectives_issued();
      const double step_base = static_cast<double>(memory_stats(device).allocated);
      reset_peak_memory(device);
      // Step 4) forward: f before each column-parallel layer does nothing; g after each
      // row-parallel layer all-reduces the block's output over the tp group.
      optimizer.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      // Step 5) backward: f all-reduces each block's input gradient over the tp group;
      // DDP all-reduces the gradients over the dp group, bucket by bucket.
      ddp.backward(loss_fn.backward());
      // Step 6) the update: each rank updates its own shard (and its replicated layers).
      traced_optimizer.step();
      ddp_trace.record();
      tp_collectives += grid.tp->collectives_issued() - tp_before;
      ++steps;
      if (steps > 2)  // step 1 allocates the momentum buffers, step 2 DDP's rebuilt buckets
        peak_step_bytes = std::max(peak_step_bytes,
                                   static_cast<double>(memory_stats(device).peak_allocated) - step_base);
      // One rank of each tp group reports the batch: the run sums over the world.
      const bool reports = grid.me.tp_rank == 0;
      run.step(loss, reports ? batch.labels.numel() : 0,
               reports ? app::count_correct(logits, batch.labels) : 0);
    }
    run.end_training();
    // Step 7) evaluate: the ranks of a tp group run the same test batches (every forward
    // is collective inside the group); the dp groups split the test set.
    run.end_epoch(app::evaluate(*model, *test_loader, grid.dp_cpu.get()));
  }
  l11::print_memory(*cpu_group, opt, formula_params,
                    static_cast<double>(memory_stats(device).allocated) - before_model,
                    peak_step_bytes, std::max<std::int64_t>(0, steps - 2),
                    steps ? static_cast<double>(tp_collectives) / static_cast<double>(steps) : 0.0);
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";
  int tp = 1;
  CLI::App cli{"Lesson 11: train an MLP on Fashion-MNIST with tensor parallelism inside groups "
               "of --tp ranks and data parallelism across them (start it with tools/mpirun -np N)."};
  app::FlagSet flags;
  flags.models = {"mlp", "deep-mlp"};
  flags.lr_schedule = true;
  flags.backend = true;
  flags.batch_help = "samples per step on each data-parallel replica (the ranks of a "
                     "tensor-parallel group share it)";
  app::add_flags(cli, opt, flags);
  cli.add_option("--tp", tp, "ranks of each tensor-parallel group (consecutive ranks); it must "
                 "divide the number of ranks, which are then tp x dp")
      ->check(app::positive_integer(1024))->capture_default_str();
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(opt, tp); });
}
