// Lesson 10, task 1: the padded flat layout of a unit's parameters, its views and the pieces
// of each rank's shard (mgpu/parallel/sharding/flat_param.h).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/parallel/sharding/flat_param.h"

namespace mgpu::parallel {

FlatLayout make_flat_layout(const std::vector<std::pair<std::string, Shape>>& params,
                            int world_size) {
  MGPU_CHECK(world_size >= 1, "make_flat_layout: world size ", world_size, " (need >= 1)");
  FlatLayout layout;
  layout.world_size = world_size;
  // What you have: params, (name, shape) pairs in order; world_size; layout (FlatLayout:
  // numel, padded_numel, shard_numel, slots, all empty now; world_size set); FlatSlot
  // {name, shape, offset, numel}; shape_numel(shape).
  // TODO(task1) BEGIN: chapter §3's layout (its example is a test): one slot per parameter,
  // in the given order, back to back from offset 0 with no gap; numel their total;
  // padded_numel the smallest multiple of world_size that is >= numel; shard_numel the
  // length of each of the world_size equal shards the padded buffer is cut into. A
  // parameter with no element gets an empty slot. Stuck: tools/hint 10 1 (about 10 lines).
  MGPU_FAIL("TODO(task1): make_flat_layout is not written yet (lessons/10_sharding/flat_layout.cpp); "
            "asked for ", params.size(), " parameter(s) on ", world_size, " rank(s)");
  // TODO(task1) END
  MGPU_CHECK(layout.numel > 0, "make_flat_layout: ", params.size(),
             " parameter(s) with no element at all; a unit needs at least one");
  return layout;
}

std::vector<Tensor> param_views(const FlatLayout& layout, const Tensor& flat) {
  check_defined("param_views", flat, "flat buffer");
  MGPU_CHECK(flat.numel() == layout.padded_numel, "param_views: the flat buffer is ", flat.str(),
             " but the layout needs ", layout.padded_numel, " elements");
  std::vector<Tensor> views;
  // What you have: layout.slots; flat.view(offset, shape) (shares flat's storage).
  // TODO(task1) BEGIN: one view of `flat` per slot, in slot order, shaped like its parameter
  // and placed at its slot: writing a view writes the flat buffer. Stuck: tools/hint 10 1
  // (about 2 lines).
  MGPU_FAIL("TODO(task1): param_views is not written yet (lessons/10_sharding/flat_layout.cpp)");
  // TODO(task1) END
  return views;
}

std::vector<ShardPiece> shard_pieces(const FlatLayout& layout, int rank) {
  MGPU_CHECK(rank >= 0 && rank < layout.world_size, "shard_pieces: rank ", rank,
             " of a layout for ", layout.world_size, " ranks");
  std::vector<ShardPiece> pieces;
  // What you have: layout.shard_begin(r), layout.shard_numel, layout.slots; ShardPiece
  // {slot, param_offset, shard_offset, numel}; std::max, std::min.
  // TODO(task1) BEGIN: chapter §3's pieces of rank's shard [r*S, (r+1)*S): one per slot that
  // overlaps it, in flat order, each with its slot's index, where it starts in the
  // parameter and in the shard, and its length (> 0); padding and empty parameters give
  // none. Over all ranks every element of every parameter lies in exactly one piece.
  // Stuck: tools/hint 10 1 (about 10 lines).
  MGPU_FAIL("TODO(task1): shard_pieces is not written yet (lessons/10_sharding/flat_layout.cpp); "
            "asked for rank ", rank);
  // TODO(task1) END
  return pieces;
}

}  // namespace mgpu::parallel
