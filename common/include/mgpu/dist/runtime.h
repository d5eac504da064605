/// @file runtime.h
/// @brief Starting and stopping the distributed runtime: ranks, nodes, and each rank's device.
///
/// Processes are started by MPI (`mpirun -np 4 prog`, `mpirun -H a:4,b:4 prog`, or Slurm);
/// mgpu does not have a launcher of its own. A program started without mpirun is rank 0 of
/// a world of 1 (Open MPI's "singleton" mode), so every multi-rank program also runs alone.
///
/// Ranks on the same machine ("node") find each other with MPI_Comm_split_type(SHARED):
/// the local rank numbers them 0..local_size-1 and picks the GPU a rank binds to.
#pragma once

#include <string>

#include "mgpu/device.h"

namespace mgpu::dist {

/// Initializes MPI (asking for MPI_THREAD_MULTIPLE: each ProcessGroup has a communication
/// thread of its own) and finds this rank's place on its node. Idempotent. argc/argv may be
/// null. Throws mgpu::Error when MPI cannot start.
void init(int* argc = nullptr, char*** argv = nullptr);
/// Stops every live ProcessGroup (joins its threads) and finalizes MPI. Idempotent.
/// Every rank must call it; a rank that skips it leaves mpirun waiting. When MPI_Finalize
/// takes about 2 s or more (mpirun answering late on a loaded machine), it then waits 3 s, so
/// that mpirun does not report the rank as "exiting improperly".
void finalize();
/// True between init() and finalize().
bool is_initialized();

/// This process's rank in the world (0 before init()).
int rank();
/// Number of ranks in the world (1 before init()).
int world_size();
/// Rank among the processes on this node: 0..local_world_size()-1 (0 before init()).
int local_rank();
/// Number of ranks on this node (1 before init()).
int local_world_size();
/// Number of nodes in the job (1 before init()).
int num_nodes();
/// True on rank 0 (where programs print their tables and summaries).
inline bool is_main_rank() { return rank() == 0; }

/// The device this rank computes on for `kind`: cuda -> cuda:local_rank (logical, so it runs
/// on physical GPU local_rank % count: ranks share GPUs when there are fewer GPUs than
/// ranks); cpu -> cpu:0 (each process has its own memory anyway).
Device rank_device(Device::Kind kind);
/// Parses a program's --device flag for this rank: "cpu" or "cuda" (bound by local rank as
/// rank_device() does) or an explicit "cuda:3". Throws mgpu::Error on anything else.
Device rank_device(const std::string& flag);

/// Ends every rank of the job at once: prints `reason` (prefixed with this rank) on stderr
/// and calls MPI_Abort. Use it where one rank alone hits an error that the others cannot
/// know about; a plain exit would leave them waiting in their next collective.
[[noreturn]] void abort_job(const std::string& reason, int exit_code = 1);

/// Whether every rank of the job is failing with this same `reason` (a wrong flag, the
/// same check on the same data): each rank that calls it waits up to `wait_s` seconds for
/// all the others to call it too (on a communicator of its own, so that collectives left
/// pending elsewhere do not matter), then compares the reasons. True: the ranks may print
/// one line and exit cleanly together; false (a rank failed alone, or the reasons differ):
/// abort_job() is the way out.
bool failing_alike_everywhere(const std::string& reason, double wait_s = 3.0);

/// RAII form of init()/finalize() for main(): `mgpu::dist::Runtime runtime(&argc, &argv);`.
class Runtime {
 public:
  /// Calls init(argc, argv); the destructor calls finalize().
  Runtime(int* argc = nullptr, char*** argv = nullptr) { init(argc, argv); }
  ~Runtime() { finalize(); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
};

}  // namespace mgpu::dist
