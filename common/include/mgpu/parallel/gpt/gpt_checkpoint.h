/// @file gpt_checkpoint.h
/// @brief A ParallelGpt's weights and AdamW state as a sharded checkpoint (io/
/// sharded_checkpoint.h): every tensor under the unsplit model's name and shape, each rank
/// naming its slice, so that a checkpoint saved on one layout loads on any other (lesson 15).
#pragma once

#include <map>
#include <string>

#include "mgpu/dist/process_group.h"
#include "mgpu/io/sharded_checkpoint.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"

namespace mgpu::parallel::gpt {

/// This rank's tensors under the checkpoint's names: each parameter and its AdamW state
/// (`state`, the optimizer's state dict, keyed "<parameter name>.exp_avg", ".exp_avg_sq",
/// ".step"; entries a load needs and the dict lacks are added, shaped as the parameter, for
/// the load to fill). TP-split tensors are boxes of the unsplit one (c_attn's rows of a TP
/// rank, seen as [3, C, ...], are one box: its heads' q, k and v); the replicas of the data
/// group and the other TP ranks hold the replicated tensors but do not write them. The last
/// stage's copy of the tied table ("lm_head.weight") is never written (the first stage
/// writes the token table) and is read from the token table's entry. `saving`: leave that
/// copy out. Throws for a split embedding (its padded rows are not written yet).
io::ShardedDict checkpoint_dict(ParallelGpt& model, std::map<std::string, Tensor>& state, bool saving);

/// Writes `model`'s weights and `optimizer`'s state as a sharded checkpoint in `dir`
/// (io::save_sharded: collective over `world`, never half-written), with `metadata`.
/// Returns the index's path.
std::string save_checkpoint(dist::ProcessGroup& world, const std::string& dir, ParallelGpt& model,
                            const optim::Optimizer& optimizer, const io::Metadata& metadata);

/// What load_checkpoint read.
struct LoadedCheckpoint {
  io::ShardedIndex index;       ///< the checkpoint's index (its metadata, the saving layout)
  io::ShardedLoadStats stats;   ///< the bytes and files this rank read
};

/// Fills `model`'s slices and `optimizer`'s state from a checkpoint saved in `dir` on any
/// layout. Throws (loading nothing into the optimizer) when the checkpoint does not cover
/// what this rank holds.
LoadedCheckpoint load_checkpoint(const std::string& dir, ParallelGpt& model, optim::Optimizer& optimizer);

}  // namespace mgpu::parallel::gpt
