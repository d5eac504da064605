// Shared by lesson 15's task 3 tests: global tensors whose every element says where it is,
// the elements of a slice of them, and bit-for-bit comparison.
#pragma once

#include <catch2/catch.hpp>

#include <vector>

#include "error_measures.h"
#include "mgpu/io/sharded_checkpoint.h"
#include "mgpu/tensor.h"

namespace reshard_test {

using namespace mgpu;
using mgpu::testing::same_bits;
namespace io = mgpu::io;

/// A global tensor of `shape` holding salt, salt + 1, ... in row-major order: an element
/// read from the wrong place shows.
inline Tensor pattern(const Shape& shape, DType dtype, double salt) {
  const std::int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = salt + static_cast<double>(i);
  return Tensor::from_vector(v, shape).to(dtype);
}

/// Whether the element at global coordinates `index` lies in `s`.
inline bool holds(const io::Slice& s, const std::vector<std::int64_t>& index) {
  for (std::size_t d = 0; d < index.size(); ++d)
    if (index[d] < s.offsets[d] || index[d] >= s.offsets[d] + s.lengths[d]) return false;
  return true;
}

/// Every element's coordinates of a tensor of `shape`, row-major.
inline std::vector<std::vector<std::int64_t>> all_indices(const Shape& shape) {
  std::vector<std::vector<std::int64_t>> out;
  const std::int64_t n = shape_numel(shape);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::int64_t> index(shape.size());
    std::int64_t rest = i;
    for (std::size_t d = shape.size(); d-- > 0;) {
      index[d] = rest % shape[d];
      rest /= shape[d];
    }
    out.push_back(index);
  }
  return out;
}

/// The elements of `slice` of the global tensor `t`, in their own contiguous tensor.
inline Tensor cut(const Tensor& t, const io::Slice& slice) {
  const std::vector<double> all = t.to(DType::f64).to_vector<double>();
  std::vector<double> out;
  const auto indices = all_indices(t.shape());
  for (std::size_t i = 0; i < indices.size(); ++i)
    if (holds(slice, indices[i])) out.push_back(all[i]);
  return Tensor::from_vector(out, slice.lengths).to(t.dtype());
}

}  // namespace reshard_test
