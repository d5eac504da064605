/// @file bucket_assignment.h
/// @brief Which gradients share a bucket: c10d's compute_bucket_assignment_by_size.
///
/// DDP does not all-reduce each gradient on its own (thousands of tiny messages, each paying
/// the latency) nor all of them at once at the end (nothing left to overlap with). It packs
/// them into buckets of a few MiB and all-reduces a bucket as soon as all its gradients are
/// final. The function is used twice: at construction on the parameters in registration
/// order (DDP then reverses the bucket list: backward produces the last layer's gradients
/// first), and once more after the first iteration on the order in which gradients really
/// became ready (Reducer::rebuild_buckets).
///
/// Its body is lesson 05's task 1 (lessons/05_ddp/bucket_assignment.cpp); the library
/// compiles in the reference, solutions/05_ddp/bucket_assignment.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mgpu/dtype.h"

namespace mgpu::parallel {

/// Cap of every bucket but the first: 25 MiB (PyTorch's bucket_cap_mb default).
inline constexpr std::size_t kDefaultBucketCapBytes = 25u * 1024 * 1024;
/// Cap of the first bucket of each dtype when bucket_cap_mb is not given: 1 MiB
/// (PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES), so the first all-reduce starts early.
inline constexpr std::size_t kDefaultFirstBucketCapBytes = 1u * 1024 * 1024;

/// What bucket assignment needs to know about one gradient.
struct GradSpec {
  std::size_t nbytes = 0;     ///< size of the gradient in bytes
  DType dtype = DType::f32;   ///< its element type (a bucket holds one dtype)
};

/// Groups tensors into buckets (PyTorch's rules, torch/csrc/distributed/c10d/reducer.cpp):
///  - walk `tensors` in the order given;
///  - one dtype per bucket: each dtype has its own open bucket;
///  - append the tensor to its dtype's open bucket; if the bucket's bytes are now >= its
///    cap, close it. A dtype's first bucket has cap size_limits[0], its second
///    size_limits[1], and so on; the last limit is used from then on;
///  - at the end close the open buckets that are not empty, in the order their dtypes
///    first appeared;
///  - a bucket lists `tensor_indices[i]` for tensors[i], or i when tensor_indices is empty;
///  - with tensor_indices empty, sort the buckets by the smallest index each holds;
///    with tensor_indices given (the rebuild: tensors in gradient-ready order) keep the
///    order in which the buckets were closed.
/// Example: bytes {100, 200, 300, 400} (all f32), limits {500}: 100 + 200 + 300 = 600
/// closes [0, 1, 2]; [3] is closed at the end. Result {{0, 1, 2}, {3}}.
/// A tensor larger than the cap gets a bucket alone; a limit of 0 closes every bucket
/// after one tensor. Throws when size_limits is empty or tensor_indices has the wrong size.
std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(
    const std::vector<GradSpec>& tensors, const std::vector<std::size_t>& size_limits,
    const std::vector<std::size_t>& tensor_indices = {});

}  // namespace mgpu::parallel
