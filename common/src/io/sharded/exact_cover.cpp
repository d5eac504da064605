// The index's promise: the chunks of each tensor lie inside it and cover it exactly, every
// element once. Checked at save (before any file is written) and at load.
#include <algorithm>

#include "mgpu/io/sharded_checkpoint.h"

namespace mgpu::io {

namespace {

// The common box of two slices of equal rank (the library's own, so that the check does
// not rest on an exercise); false when they share no element.
bool common_box(const Slice& a, const Slice& b, Slice& out) {
  Slice c;
  for (std::size_t d = 0; d < a.offsets.size(); ++d) {
    const std::int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const std::int64_t hi = std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]);
    if (hi <= lo) return false;
    c.offsets.push_back(lo);
    c.lengths.push_back(hi - lo);
  }
  out = c;
  return true;
}

}  // namespace

void check_exact_cover(const ShardedIndex& index, const std::string& source) {
  for (const auto& [name, info] : index.tensors) {
    const std::int64_t total = shape_numel(info.shape);
    std::int64_t covered = 0;
    for (std::size_t i = 0; i < info.chunks.size(); ++i) {
      const ShardChunk& c = info.chunks[i];
      MGPU_CHECK(c.slice.offsets.size() == info.shape.size() &&
                     c.slice.lengths.size() == info.shape.size(),
                 source, ": tensor '", name, "' of shape ", shape_str(info.shape), ": the chunk ",
                 c.slice.str(), " in ", c.file, " has ", c.slice.offsets.size(), " offsets and ",
                 c.slice.lengths.size(), " lengths for ", info.shape.size(), " dimensions");
      for (std::size_t d = 0; d < info.shape.size(); ++d)
        MGPU_CHECK(c.slice.offsets[d] >= 0 && c.slice.lengths[d] >= 0 &&
                       c.slice.offsets[d] + c.slice.lengths[d] <= info.shape[d],
                   source, ": tensor '", name, "' of shape ", shape_str(info.shape), ": the chunk ",
                   c.slice.str(), " in ", c.file, " lies outside the tensor (dimension ", d, ")");
      for (std::size_t j = 0; j < i; ++j) {
        Slice both;
        if (common_box(info.chunks[j].slice, c.slice, both))
          MGPU_FAIL(source, ": tensor '", name, "' of shape ", shape_str(info.shape),
                    ": an overlap: the chunks ", info.chunks[j].slice.str(), " in ",
                    info.chunks[j].file, " and ", c.slice.str(), " in ", c.file,
                    " both hold ", both.str(),
                    " (a replicated tensor must be written by one rank only)");
      }
      covered += c.slice.numel();
    }
    // Disjoint boxes inside the tensor: they cover it exactly when their sizes add up.
    MGPU_CHECK(covered == total, source, ": tensor '", name, "' of shape ", shape_str(info.shape),
               ": a gap: its ", info.chunks.size(), " chunk(s) hold ", covered, " of its ", total,
               " elements; ", total - covered,
               " are in no chunk (a shard missing: did every rank that holds a part write it?)");
  }
}

}  // namespace mgpu::io
