// Slices of a tensor (boxes: offsets and lengths per dimension) and the shards a rank
// declares with them: the whole tensor, a part along one dimension, a replicated copy.
#include <sstream>

#include "mgpu/io/sharded_checkpoint.h"

namespace mgpu::io {

std::int64_t Slice::numel() const {
  std::int64_t n = 1;
  for (std::int64_t l : lengths) n *= l;
  return n;
}

std::string Slice::str() const {
  std::ostringstream out;
  out << '[';
  for (std::size_t d = 0; d < offsets.size(); ++d) {
    const std::int64_t length = d < lengths.size() ? lengths[d] : 0;
    out << (d ? ", " : "") << offsets[d] << ':' << offsets[d] + length;
  }
  out << ']';
  return out.str();
}

Slice whole_slice(const Shape& shape) {
  return Slice{std::vector<std::int64_t>(shape.size(), 0), shape};
}

Slice split_slice(const Shape& shape, int dim, int parts, int part) {
  MGPU_CHECK(dim >= 0 && dim < static_cast<int>(shape.size()), "split_slice: dimension ", dim,
             " of a tensor of shape ", shape_str(shape), " (", shape.size(), " dimensions)");
  MGPU_CHECK(parts > 0 && part >= 0 && part < parts, "split_slice: part ", part, " of ", parts,
             " (it must be in [0, ", parts, "))");
  const std::int64_t size = shape[static_cast<std::size_t>(dim)];
  const std::int64_t base = size / parts, extra = size % parts;
  Slice s = whole_slice(shape);
  s.offsets[static_cast<std::size_t>(dim)] = part * base + std::min<std::int64_t>(part, extra);
  s.lengths[static_cast<std::size_t>(dim)] = base + (part < extra ? 1 : 0);
  return s;
}

std::int64_t linear_index_in(const Slice& slice, const std::vector<std::int64_t>& index) {
  std::int64_t at = 0;
  for (std::size_t d = 0; d < slice.offsets.size(); ++d)
    at = at * slice.lengths[d] + (index[d] - slice.offsets[d]);
  return at;
}

ShardedTensor replicated(const Tensor& local, bool writes) {
  return ShardedTensor{local.shape(), whole_slice(local.shape()), local, writes};
}

ShardedTensor split_along(const Tensor& local, const Shape& global_shape, int dim, int parts,
                          int part, bool writes) {
  ShardedTensor t{global_shape, split_slice(global_shape, dim, parts, part), local, writes};
  MGPU_CHECK(!local.defined() || local.shape() == t.slice.lengths, "split_along: part ", part,
             " of ", parts, " along dimension ", dim, " of ", shape_str(global_shape), " is ",
             shape_str(t.slice.lengths), ", the local tensor is ", local.str());
  return t;
}

std::string shard_file_name(int rank) {
  std::string digits = std::to_string(rank);
  if (digits.size() < 5) digits.insert(0, 5 - digits.size(), '0');
  return "rank-" + digits + ".safetensors";
}

}  // namespace mgpu::io
