/// @file ranks.h
/// @brief Step 0 of every program started with mpirun: one process per device, its process
/// group, and a CPU group for what the run reports.
///
///     const app::Ranks ranks = app::init_ranks(opt);     // --device, --backend
///     app::Run run(opt, "lesson 05: ...", ranks);         // sums and trace over ranks.cpu_group
///     parallel::DistributedDataParallel ddp(model, *ranks.group);
#pragma once

#include <memory>

#include "mgpu/app/flags.h"
#include "mgpu/device.h"
#include "mgpu/dist/process_group.h"

namespace mgpu::app {

/// This process's place in the job, and the groups a data-parallel program needs.
struct Ranks {
  int rank = 0;                          ///< this process's rank in the world
  int world = 1;                         ///< ranks in the world
  Device device;                         ///< this rank's device (--device, by local rank)
  dist::ProcessGroup* group = nullptr;   ///< the default group on `device` (--backend)
  /// A CPU group over every rank: the loss and accuracy sums, the trace, checkpoints' barriers.
  std::shared_ptr<dist::ProcessGroup> cpu_group;
};

/// This rank's device (dist::rank_device of opt.device), the default process group on it
/// (dist::init_process_group of opt.backend, which prints the backend it picked and why),
/// then quiet_cpu_group(). Collective: every rank calls it once, at the same point.
Ranks init_ranks(const Options& opt);

/// A new CPU group (backend mpi) over every rank that does not announce its backend: the
/// run's bookkeeping, not the lesson's communication. Collective over the world.
std::shared_ptr<dist::ProcessGroup> quiet_cpu_group();

}  // namespace mgpu::app
