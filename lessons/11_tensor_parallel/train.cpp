// train: lesson 11's program. Trains an MLP on Fashion-MNIST with 2-D parallelism: each
// group of --tp consecutive ranks shares every Megatron MLP block of the model (your
// column- and row-parallel Linear), and the world / tp such groups are data parallel
// (the library's DDP, lesson 05's reference) over groups of their own.
//
//   tools/mpirun -np 2 build/solutions/11_tensor_parallel/train --tp 2     (tensor parallel only)
//   tools/mpirun -np 4 build/solutions/11_tensor_parallel/train --tp 2     (2 x 2: TP in pairs, DP across)
//   tools/mpirun -np 4 build/solutions/11_tensor_parallel/train --tp 1     (data parallel only)
//   build/lessons/11_tensor_parallel/train --data synthetic --epochs 1    (a world of 1)
#include <cstdio>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "tensor_parallel.h"

namespace {

using namespace mgpu;
namespace par = mgpu::parallel;
namespace l11 = mgpu::lesson11;

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

// "1.794 MiB".
std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

// The groups of a tp x dp grid. new_group is collective over the world, so every rank
// creates every group in the same order and keeps the ones it belongs to.
struct Grid {
  l11::GridPosition me;
  std::shared_ptr<dist::ProcessGroup> tp, dp, dp_cpu;
};

Grid make_grid(int tp, const std::string& backend, const Device& device) {
  const int world = dist::world_size();
  Grid g;
  g.me = l11::grid_position(world, tp, dist::rank());
  dist::GroupOptions quiet;
  quiet.announce = false;
  for (int first = 0; first < world; first += tp)  // tensor-parallel groups: blocks of tp
    if (auto group = dist::new_group(l11::grid_position(world, tp, first).tp_group, backend,
                                     device, quiet))
      g.tp = group;
  for (int t = 0; t < tp; ++t) {  // data-parallel groups: every tp-th rank
    const std::vector<int> ranks = l11::grid_position(world, tp, t).dp_group;
    if (auto group = dist::new_group(ranks, backend, device, quiet)) g.dp = group;
    if (auto group = dist::new_group(ranks, "mpi", Device::cpu(), quiet)) g.dp_cpu = group;
  }
  MGPU_CHECK(g.tp && g.dp && g.dp_cpu, "rank ", dist::rank(), " found no group of its own: "
             "grid_position's groups must contain the rank they were asked for");
  return g;
}

int train(const app::Options& opt, int tp) {
  // Step 0) one process per device; the grid: tensor-parallel groups of tp consecutive
  // ranks, data-parallel groups across them; a CPU group over the world for the run's sums.
  const int world = dist::world_size();
  MGPU_CHECK(tp >= 1 && world % tp == 0, "--tp ", tp, " does not divide the ", world,
             " rank(s); start a multiple of --tp ranks (tools/mpirun -np N)");
  const Device device = dist::rank_device(opt.device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> cpu_group = dist::new_group("mpi", Device::cpu(), quiet);
  const Grid grid = make_grid(tp, opt.backend, device);
  const int dp = world / tp;
  app::Run run(opt, "lesson 11: tensor parallelism, " + std::to_string(world) + " rank(s) as tp " +
                        std::to_string(tp) + " x dp " + std::to_string(dp) + ", backend " +
                        grid.tp->backend_name(), {device}, cpu_group.get());
  run.set_data_parallel_size(dp);
  run.add_metric_fields({{"tp", tp}, {"dp", dp}});
  dist::log_all("tensor-parallel group ", rank_list(grid.me.tp_group), " (shard ",
                grid.me.tp_rank, " of ", tp, "), data-parallel group ",
                rank_list(grid.me.dp_group), " (replica ", grid.me.dp_rank, " of ", dp, ")");

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
  const std::int64_t formula_params = l11::parameters_per_rank(*full, tp, grid.me.tp_rank);
  std::shared_ptr<nn::Sequential> model = l11::tensor_parallelize(*full, *grid.tp);
  full.reset();  // the shards are copies: the full model goes
  const double model_bytes = static_cast<double>(memory_stats(device).allocated) - before_model;
  par::DistributedDataParallel ddp(model, *grid.dp);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  dist::log0("model: ", opt.model, " (", nn::model_summary(opt.model), "), ", full_params,
             " parameters; ", l11::count_mlp_blocks(*model), " Megatron MLP block(s) split ",
             tp, " ways, the other layers replicated:\n", model->summary());
  dist::log_all("parameters on this rank: ", model->num_parameters(), " (formula ",
                formula_params, ", full model ", full_params, "); parameters + gradients ",
                mib(model_bytes), " measured, 2 x 4 B x ", formula_params, " = ",
                mib(8.0 * static_cast<double>(formula_params)), " by the formula");
  dist::log0("batch: ", opt.batch_size, " per replica, global ", opt.batch_size * dp, " (", dp,
             " data-parallel replica(s); the ", tp, " ranks of a replica read the same batch)");

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
      const double forward_begin = app::now_s();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      // Step 5) backward: f all-reduces each block's input gradient over the tp group;
      // DDP all-reduces the gradients over the dp group, bucket by bucket.
      const double backward_begin = app::now_s();
      ddp.backward(loss_fn.backward());
      // Step 6) the update: each rank updates its own shard (and its replicated layers).
      const double opt_begin = app::now_s();
      optimizer.step();
      if (run.trace().on()) {
        synchronize(device);
        run.trace().span("compute", "forward", forward_begin, backward_begin);
        run.trace().span("compute", "backward", backward_begin, opt_begin);
        run.trace().span("compute", "optimizer", opt_begin, app::now_s());
      }
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
  const double state_bytes = static_cast<double>(memory_stats(device).allocated) - before_model;
  dist::log_all("model state after training: ", mib(state_bytes), " measured; 4 B x ",
                formula_params, " x 4 (weights, gradients, momentum, DDP's bucket copy of the "
                "gradients) = ", mib(16.0 * static_cast<double>(formula_params)));
  dist::log0("tensor-parallel collectives per training step: ",
             steps ? static_cast<double>(tp_collectives) / static_cast<double>(steps) : 0.0,
             " (2 per Megatron MLP block: g forward, f backward)");
  dist::log_all("peak memory of a step above the model state: ", mib(peak_step_bytes),
                " (activations and temporaries of a batch of ", opt.batch_size, ")");
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
  flags.device_help = "cpu, or cuda (rank r uses cuda:<local rank>), or cuda:N";
  flags.batch_help = "samples per step on each data-parallel replica (the ranks of a "
                     "tensor-parallel group share it)";
  app::add_flags(cli, opt, flags);
  cli.add_option("--tp", tp, "ranks of each tensor-parallel group (consecutive ranks); it must "
                 "divide the number of ranks, which are then tp x dp")
      ->check(app::positive_integer(1024))->capture_default_str();
  CLI11_PARSE(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(opt, tp); });
}
