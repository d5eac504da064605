// Private: what the runtime needs from every backend's group, and runtime internals the
// backends use.
#pragma once

#include "mpi_include.h"

#include <memory>
#include <mutex>
#include <vector>

#include "engine.h"
#include "mgpu/dist/all_to_all.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/dist/traffic.h"

namespace mgpu::dist::detail {

/// A ProcessGroup that the runtime can stop at finalize(), and that counts its traffic.
class BackendGroup : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  /// Finishes queued ops, joins the threads, frees the communicators. Idempotent; after it
  /// every op throws.
  virtual void shutdown() = 0;
  Traffic traffic() const override;

 protected:
  /// Counts a collective of `kind` (not all_to_all) handed `t`, its input (nullptr: barrier).
  void count_collective(OpKind kind, const Tensor* t);
  /// Counts an all_to_all of `p`'s pieces, `element_bytes` each element: the pieces for
  /// the other ranks.
  void count_all_to_all(const AllToAllPieces& p, std::size_t element_bytes);
  /// Counts the messages of a send, recv or batch_isend_irecv.
  void count_p2p(const std::vector<P2POp>& ops);

 private:
  mutable std::mutex traffic_mutex_;
  Traffic traffic_;
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
