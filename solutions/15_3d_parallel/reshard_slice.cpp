// Task 3: the slice a rank reads on a new layout. A checkpoint stores each tensor as chunks
// (boxes of the global tensor); a rank of another layout wants its own box. What it reads
// from one chunk is the common box of the two, located three ways: in the tensor, inside
// the chunk (where its bytes are in the file) and inside the wanted slice (where they go).
#include <algorithm>

#include "mgpu/io/sharded_checkpoint.h"

namespace mgpu::io {

bool intersect_slices(const Slice& stored, const Slice& wanted, SliceOverlap& out) {
  const std::size_t n = stored.offsets.size();
  MGPU_CHECK(stored.lengths.size() == n && wanted.offsets.size() == n && wanted.lengths.size() == n,
             "intersect_slices: the stored chunk ", stored.str(), " and the wanted slice ",
             wanted.str(), " differ in their number of dimensions");
  // What you have: stored and wanted (offsets and lengths along each of n dimensions; a
  // 0-d tensor has n = 0 and one element); out (global: Slice; in_stored, in_wanted:
  // offsets); SliceOverlap; std::max, std::min.
  // TODO(task3) BEGIN: chapter §"Checkpoints that change layout", loading on another
  // layout: the common box of the two slices. Invariant: an element is in the result
  // exactly when it is in both slices; no common element returns false and leaves `out`
  // untouched; otherwise true, out.global is the box in the tensor's coordinates and
  // in_stored / in_wanted are its offsets inside each slice. Stuck: tools/hint 15 3
  // (about 12 lines).
  SliceOverlap r;
  for (std::size_t d = 0; d < n; ++d) {
    const std::int64_t begin = std::max(stored.offsets[d], wanted.offsets[d]);
    const std::int64_t end = std::min(stored.offsets[d] + stored.lengths[d],
                                      wanted.offsets[d] + wanted.lengths[d]);
    if (end <= begin) return false;
    r.global.offsets.push_back(begin);
    r.global.lengths.push_back(end - begin);
    r.in_stored.push_back(begin - stored.offsets[d]);
    r.in_wanted.push_back(begin - wanted.offsets[d]);
  }
  out = r;
  return true;
  // TODO(task3) END
}

}  // namespace mgpu::io
