// Private: what the runtime needs from every backend's group, and runtime internals the
// backends use.
#pragma once

#include "mpi_include.h"

#include <memory>

#include "mgpu/dist/process_group.h"

namespace mgpu::dist::detail {

/// A ProcessGroup that the runtime can stop at finalize().
class BackendGroup : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  /// Finishes queued ops, joins the threads, frees the communicators. Idempotent; after it
  /// every op throws.
  virtual void shutdown() = 0;
};

/// finalize() shuts down every group registered here that is still alive.
void register_group(const std::shared_ptr<BackendGroup>& group);
/// The communicator of the ranks on this node (MPI_Comm_split_type SHARED).
MPI_Comm node_comm();
/// Drops the group made by init_process_group() (finalize() calls it).
void reset_default_group();
/// Throws unless init() has been called.
void require_initialized(const char* what);

}  // namespace mgpu::dist::detail
