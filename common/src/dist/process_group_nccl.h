// Private: the nccl backend (compiled only with MGPU_WITH_NCCL).
#pragma once

#include <memory>

#include "group_base.h"

namespace mgpu::dist::detail {

/// True when this build has the nccl backend.
bool built_with_nccl();
/// A group over the ranks of `comm` (which it owns and frees) whose ops run as NCCL kernels
/// on a stream of the group's own on `device`. Collective over `comm`. `id`: its world-wide id
/// (register_group_members). Throws in builds without NCCL.
std::shared_ptr<BackendGroup> make_nccl_group(const Device& device, const GroupOptions& options,
                                              MPI_Comm comm, int id);

}  // namespace mgpu::dist::detail
