/// @file sharded_state.h
/// @brief Checkpoints of a sharded model: its whole training state in the form a DDP run
/// saves (lesson 07's io::TrainingState), gathered from the shards, and loaded back onto
/// any number of ranks (resharding).
///
/// A rank's optimizer state is keyed by its master shards ("flat_param_2.exp_avg", [S]
/// elements); what it means depends on N, because S = padded numel / N. The full state
/// names everything by the model's parameters instead ("5.weight.exp_avg", the
/// parameter's shape), as a DDP run's checkpoint does, so it does not depend on N: save at
/// 2 ranks, load at 3 (or into a DDP or single-process run, and back). Each rank cuts its
/// pieces out of the full tensors with the unit's layout (shard_pieces); the padding gets
/// zeros. The price: the full state is gathered on every rank at save time (4 x 3 bytes
/// per parameter with AdamW), which is what rank 0 writes anyway.
#pragma once

#include <string>

#include "mgpu/io/checkpoint.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/parallel/sharding/sharded_data_parallel.h"

namespace mgpu::parallel {

/// The whole training state of `sdp`: model.NAME the full fp32 parameters (from the
/// master shards) and the buffers; optimizer.NAME.STATE the optimizer's per-element
/// state gathered whole and shaped like the parameter, its scalars (AdamW's step) copied
/// to every parameter of the unit; progress and RNG streams as capture_training_state.
/// `optimizer` must update sdp.parameters(). A collective: every rank calls it and gets
/// the same full state. Save it with io::save_checkpoint (rank 0 writes).
io::TrainingState capture_sharded_training_state(ShardedDataParallel& sdp,
                                                 const optim::Optimizer& optimizer,
                                                 const io::TrainingProgress& progress);

/// Loads a full state (from capture_sharded_training_state at any world size, or from a
/// DDP run's checkpoint of the same model) into `sdp` and `optimizer` on this rank: each
/// keeps its part of every unit. Checks first, on every rank, that every name the model
/// has is there with its shape, and that no name is left over; throws naming the first
/// problem and changes nothing. No communication (every rank holds the state); the next
/// forward gathers. Returns the progress, as io::restore_training_state.
io::TrainingProgress restore_sharded_training_state(const io::TrainingState& state,
                                                    ShardedDataParallel& sdp,
                                                    optim::Optimizer& optimizer,
                                                    const std::string& source = "checkpoint");

}  // namespace mgpu::parallel
