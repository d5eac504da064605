/// @file bucket_assignment.h
/// @brief Which gradients share a bucket: c10d's compute_bucket_assignment_by_size.
///
/// DDP does not all-reduce each gradient on its own (thousands of tiny messages, each paying
/// the latency) nor all of them at once at the end (nothing left to overlap with). It packs
/// them into buckets of a few MiB and all-reduces a bucket as soon as all its gradients are
/// final. Backward produces gradients roughly in reverse registration order (the last layer
/// first), so buckets are filled walking the parameters from last to first.
#pragma once

#include <cstddef>
#include <vector>

#include "mgpu/dtype.h"

namespace mgpu::parallel {

/// PyTorch's defaults: bucket_cap_mb = 25, and a small first bucket (1 MiB) so the first
/// all-reduce starts early in backward instead of after 25 MiB of gradients.
/// Cap of every bucket but the first: 25 MiB (PyTorch's bucket_cap_mb = 25).
inline constexpr std::size_t kDefaultBucketCapBytes = 25u * 1024 * 1024;
/// Cap of the first bucket: 1 MiB (PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES).
inline constexpr std::size_t kDefaultFirstBucketCapBytes = 1u * 1024 * 1024;

/// What bucket assignment needs to know about one gradient.
struct GradSpec {
  std::size_t nbytes = 0;     ///< size of the gradient in bytes
  DType dtype = DType::f32;   ///< its element type (a bucket holds one dtype)
};

/// Groups tensors (given in registration order) into buckets:
///  - walk the tensors from the last to the first;
///  - one dtype per bucket: each dtype has its own open bucket;
///  - append the tensor to its dtype's open bucket; when that bucket's size reaches the
///    current cap (size >= cap, after adding), close it; a dtype's first bucket uses
///    size_limits[0], its next ones size_limits[1], ... and the last limit from then on;
///  - at the end close every non-empty open bucket.
/// Buckets are ordered by the walk position of their first tensor; inside a bucket the
/// indices are in walk order. A single tensor larger than the cap gets a bucket alone.
/// size_limits must not be empty; a limit of 0 closes every bucket after one tensor.
std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(
    const std::vector<GradSpec>& tensors, const std::vector<std::size_t>& size_limits);

/// The caps DDPOptions asks for: {first_bucket_cap, bucket_cap}.
std::vector<std::size_t> bucket_size_limits(std::size_t first_bucket_cap_bytes,
                                            std::size_t bucket_cap_bytes);

}  // namespace mgpu::parallel
