/// @file flat_param.h
/// @brief The flat, padded, sharded layout of a unit's parameters (FSDP's FlatParameter).
///
/// Sharded data parallelism keeps each rank's part of the parameters, gradients and
/// optimizer state. The parameters of a unit (a layer, a block, or the whole model) are
/// laid one after another into one flat buffer, padded at the end to a multiple of the
/// world size N, and cut into N equal shards: rank r owns elements
/// [r * shard_numel, (r + 1) * shard_numel). Equal shards are what all_gather and
/// reduce_scatter need (every rank contributes the same number of elements); the padding
/// is at most N - 1 elements per unit and always holds zeros.
///
///     flat buffer, 3 ranks, parameters a (5), b (3), c (2): numel 10, padded 12, shard 4
///     | a a a a | a b b b | c c . . |
///       rank 0    rank 1    rank 2      (. padding)
///
/// A parameter may straddle two shards (a above): a rank's shard holds pieces of
/// parameters, described by shard_pieces(). The three functions are lesson 10's task 1
/// (lessons/10_sharding/flat_layout.cpp); the library compiles in the reference,
/// solutions/10_sharding/flat_layout.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// Where one parameter lives in its unit's flat buffer.
struct FlatSlot {
  std::string name;         ///< the parameter's dotted name ("3.weight")
  Shape shape;              ///< its shape
  std::int64_t offset = 0;  ///< its first element in the flat buffer
  std::int64_t numel = 0;   ///< its number of elements
};

/// The flat layout of a unit's parameters over `world_size` ranks.
struct FlatLayout {
  std::vector<FlatSlot> slots;    ///< the parameters in order, back to back from offset 0
  std::int64_t numel = 0;         ///< elements of all parameters together
  std::int64_t padded_numel = 0;  ///< numel rounded up to a multiple of world_size
  std::int64_t shard_numel = 0;   ///< padded_numel / world_size: what each rank owns
  int world_size = 1;             ///< the number of shards
  /// The first element of rank r's shard in the flat buffer.
  std::int64_t shard_begin(int rank) const { return rank * shard_numel; }
};

/// A piece of one parameter that lies in one rank's shard.
struct ShardPiece {
  std::size_t slot = 0;            ///< which parameter: an index into FlatLayout::slots
  std::int64_t param_offset = 0;   ///< the piece's first element within the (flattened) parameter
  std::int64_t shard_offset = 0;   ///< where the piece starts within the shard
  std::int64_t numel = 0;          ///< its number of elements (> 0)
};

/// Lesson 10, task 1. The layout of `params` (name and shape of each, in order) on
/// `world_size` ranks: offsets back to back from 0, numel their sum, padded_numel the
/// smallest multiple of world_size >= numel, shard_numel = padded_numel / world_size.
/// Throws mgpu::Error when world_size < 1 or there is no parameter element at all.
FlatLayout make_flat_layout(const std::vector<std::pair<std::string, Shape>>& params,
                            int world_size);

/// Lesson 10, task 1. One view per slot into `flat` (a tensor of padded_numel elements),
/// shaped like the parameter: writing the view writes the flat buffer. Throws unless flat
/// has padded_numel elements.
std::vector<Tensor> param_views(const FlatLayout& layout, const Tensor& flat);

/// Lesson 10, task 1. The pieces of parameters in `rank`'s shard, in flat order (padding
/// is no piece; a shard of padding only has none). Throws for a rank outside [0, world_size).
std::vector<ShardPiece> shard_pieces(const FlatLayout& layout, int rank);

}  // namespace mgpu::parallel
