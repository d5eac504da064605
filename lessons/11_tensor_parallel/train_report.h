/// @file train_report.h
/// @brief What lesson 11's program sets up and prints around its training loop: the tp x dp
/// grid's groups, the set-up lines, and memory per rank against the formula. Program-only:
/// the tests do not use it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/models.h"
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::lesson11 {

/// "[0, 2]".
inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

/// This rank's groups of a tp x dp grid.
struct Grid {
  parallel::tp::GridPosition me;                       ///< this rank's place in the grid
  std::shared_ptr<dist::ProcessGroup> tp, dp, dp_cpu;  ///< its groups (dp_cpu: on the CPU)
};

/// The groups of a tp x dp grid (grid_position's). new_group is collective over the world,
/// so every rank creates every group in the same order and keeps the ones it belongs to.
/// Prints each rank's groups.
inline Grid make_grid(int tp, const std::string& backend, const Device& device) {
  const int world = dist::world_size();
  MGPU_CHECK(tp >= 1 && world % tp == 0, "--tp ", tp, " does not divide the ", world,
             " rank(s); start a multiple of --tp ranks (tools/mpirun -np N)");
  Grid g;
  g.me = parallel::tp::grid_position(world, tp, dist::rank());
  dist::GroupOptions quiet;
  quiet.announce = false;
  for (int first = 0; first < world; first += tp)  // tensor-parallel groups: blocks of tp
    if (auto group = dist::new_group(parallel::tp::grid_position(world, tp, first).tp_group,
                                     backend, device, quiet))
      g.tp = group;
  for (int t = 0; t < tp; ++t) {  // data-parallel groups: every tp-th rank
    const std::vector<int> ranks = parallel::tp::grid_position(world, tp, t).dp_group;
    if (auto group = dist::new_group(ranks, backend, device, quiet)) g.dp = group;
    if (auto group = dist::new_group(ranks, "mpi", Device::cpu(), quiet)) g.dp_cpu = group;
  }
  MGPU_CHECK(g.tp && g.dp && g.dp_cpu, "rank ", dist::rank(), " found no group of its own: "
             "grid_position's groups must contain the rank they were asked for");
  return g;
}

/// Each rank's line: its groups in the grid.
inline void log_grid(const Grid& g, int tp, int dp) {
  dist::log_all("tensor-parallel group ", rank_list(g.me.tp_group), " (shard ", g.me.tp_rank,
                " of ", tp, "), data-parallel group ", rank_list(g.me.dp_group), " (replica ",
                g.me.dp_rank, " of ", dp, ")");
}

/// The model line (rank 0) and each rank's parameters against the formula.
inline void print_setup(const app::Options& opt, nn::Sequential& model, int tp,
                        std::int64_t full_params, std::int64_t formula_params, double model_bytes) {
  dist::log0(app::model_line(opt.model, full_params), "; ", parallel::tp::count_mlp_blocks(model),
             " Megatron MLP block(s) split ", tp,
             " ways, the other layers replicated:\n", model.summary());
  dist::log_all("parameters on this rank: ", model.num_parameters(), " (formula ", formula_params,
                ", full model ", full_params, "); parameters + gradients ",
                app::mib(model_bytes, 3), " measured, 2 x 4 B x ", formula_params, " = ",
                app::mib(8.0 * static_cast<double>(formula_params), 3), " by the formula");
}

/// Every rank's `line`, printed by rank 0 in rank order as "[rank r] line": the lines of the
/// other ranks then come before rank 0's summary instead of after it (each process's output
/// reaches mpirun on its own schedule). `cpu` is a CPU group over the whole world.
inline void log_each_rank(dist::ProcessGroup& cpu, const std::string& line) {
  const int world = cpu.size();
  Tensor lengths = Tensor::empty({world}, DType::i64, Device::cpu());
  cpu.all_gather(lengths, Tensor::from_vector<std::int64_t>(
                              {static_cast<std::int64_t>(line.size())}, {1})).wait();
  const std::vector<std::int64_t> length = lengths.to_vector<std::int64_t>();
  const std::int64_t longest = std::max<std::int64_t>(
      1, *std::max_element(length.begin(), length.end()));
  std::vector<std::int32_t> mine(static_cast<std::size_t>(longest), 0);
  for (std::size_t i = 0; i < line.size(); ++i) mine[i] = static_cast<unsigned char>(line[i]);
  Tensor all = Tensor::empty({world * longest}, DType::i32, Device::cpu());
  cpu.all_gather(all, Tensor::from_vector<std::int32_t>(mine, {longest})).wait();
  if (cpu.rank() != 0) return;
  const std::vector<std::int32_t> chars = all.to_vector<std::int32_t>();
  for (int r = 0; r < world; ++r) {
    std::string text;
    for (std::int64_t i = 0; i < length[r]; ++i) text += static_cast<char>(chars[r * longest + i]);
    dist::log0("[rank ", r, "] ", text);
  }
}

/// After training: each rank's model state and a step's peak against the formula (printed by
/// rank 0, before its summary), and the tensor-parallel collectives per step. A step's peak
/// is measured from step 3 on (step 1 allocates the momentum, step 2 DDP's rebuilt buckets):
/// `measured_steps` of them.
inline void print_memory(dist::ProcessGroup& cpu, const app::Options& opt,
                         std::int64_t formula_params, double state_bytes,
                         double peak_step_bytes, std::int64_t measured_steps,
                         double tp_collectives_per_step) {
  log_each_rank(cpu, "model state after training: " + app::mib(state_bytes, 3) +
                         " measured; 4 B x " + std::to_string(formula_params) +
                         " x 4 (weights, gradients, momentum, DDP's bucket copy of the "
                         "gradients) = " + app::mib(16.0 * static_cast<double>(formula_params), 3));
  dist::log0("tensor-parallel collectives per training step: ", tp_collectives_per_step,
             " (2 per Megatron MLP block: g forward, f backward)");
  const std::string batch = " (activations and temporaries of a batch of " +
                            std::to_string(opt.batch_size) + ")";
  log_each_rank(cpu, measured_steps > 0
                         ? "peak memory of a step above the model state: " +
                               app::mib(peak_step_bytes, 3) + batch
                         : "peak memory of a step above the model state: not measured: it is "
                           "measured from step 3 on (step 1 allocates the momentum, step 2 "
                           "DDP's rebuilt buckets); run 3 or more steps");
}

}  // namespace mgpu::lesson11
