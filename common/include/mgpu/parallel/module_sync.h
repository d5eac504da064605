/// @file module_sync.h
/// @brief Making every rank's replica of a model the same: checks and broadcasts.
///
/// DDP keeps the replicas identical by construction: they start equal (rank 0's values are
/// broadcast), and every rank applies the same averaged gradient. These are the collectives
/// behind that, usable on their own (a checkpoint loaded on rank 0, lesson 07).
#pragma once

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/module.h"

namespace mgpu::parallel {

/// Checks that every rank's module has the same parameters: count, and per parameter the
/// shape, dtype and requires_grad (PyTorch's _verify_param_shape_across_processes).
/// Throws mgpu::Error on every rank, naming the first parameter that differs, its value on
/// rank 0 and on the first rank that differs. A collective.
void verify_params_across_ranks(nn::Module& module, dist::ProcessGroup& group);

/// Every parameter value and buffer <- root's (PyTorch's _sync_module_states). A collective.
void broadcast_module_state(nn::Module& module, dist::ProcessGroup& group, int root = 0);
/// Every buffer (BatchNorm's running statistics, ...) <- root's. A collective.
void broadcast_buffers(nn::Module& module, dist::ProcessGroup& group, int root = 0);

}  // namespace mgpu::parallel
