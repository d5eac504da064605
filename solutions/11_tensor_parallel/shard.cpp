// Task 1: who holds what. A tensor-parallel layer keeps one shard of the full layer's
// features; a 2-D grid of tp x dp ranks says which shard a rank holds (its tp rank) and
// which part of the batch it reads (its dp rank).
#include <algorithm>

#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::tp {

ShardRange shard_range(std::int64_t total, int parts, int index) {
  MGPU_CHECK(parts >= 1 && parts <= total, "shard_range: ", total, " features cannot be cut into ",
             parts, " non-empty shards (need 1 <= parts <= features)");
  MGPU_CHECK(index >= 0 && index < parts, "shard_range: shard ", index, " of ", parts,
             " does not exist (shards are 0..", parts - 1, ")");
  ShardRange r;
  // What you have: total, parts, index; r (ShardRange: begin, end, size()); std::min.
  // TODO(task1) BEGIN: shard `index` of chapter §4's cut (torch.tensor_split's rule), as
  // [r.begin, r.end): the shards, in index order, tile [0, total) without gap or overlap,
  // their sizes differ by at most one and the longer ones come first; 10 over 3 is [0, 4)
  // [4, 7) [7, 10). Stuck: tools/hint 11 1 (about 4 lines).
  const std::int64_t base = total / parts, longer = total % parts;
  r.begin = index * base + std::min<std::int64_t>(index, longer);
  r.end = r.begin + base + (index < longer ? 1 : 0);
  // TODO(task1) END
  return r;
}

GridPosition grid_position(int world, int tp, int rank) {
  MGPU_CHECK(tp >= 1 && world >= 1 && world % tp == 0, "grid_position: ", world,
             " ranks cannot be arranged as tensor-parallel groups of ", tp,
             " (--tp must divide the number of ranks)");
  MGPU_CHECK(rank >= 0 && rank < world, "grid_position: rank ", rank, " is not one of ", world);
  GridPosition p;
  // What you have: world, tp, rank; p (GridPosition: tp_rank, dp_rank, and tp_group and
  // dp_group, world ranks in ascending order).
  // TODO(task1) BEGIN: rank's place in chapter §6's Megatron grid, where the
  // tensor-parallel groups are blocks of tp consecutive world ranks: its rank inside each
  // of its two groups and both groups' members. Every rank is in one group of each kind,
  // and its two groups meet in it alone; world 4, tp 2: rank 3 is tp_rank 1, dp_rank 1,
  // tp_group {2, 3}, dp_group {1, 3}. Stuck: tools/hint 11 1 (about 6 lines).
  p.tp_rank = rank % tp;
  p.dp_rank = rank / tp;
  for (int i = 0; i < tp; ++i) p.tp_group.push_back(p.dp_rank * tp + i);
  for (int i = 0; i < world / tp; ++i) p.dp_group.push_back(i * tp + p.tp_rank);
  // TODO(task1) END
  return p;
}

}  // namespace mgpu::parallel::tp
