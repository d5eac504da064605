/// @file comm_hook.h
/// @brief Communication hooks: how a full bucket is reduced across ranks (c10d's comm hooks).
///
/// The Reducer hands each full bucket to a hook; the hook starts the communication and
/// returns a CommFuture; finalize_backward() waits for it, then copies the bucket back into
/// the gradients. The default hook all-reduces the bucket; fp16_compress_hook halves the
/// bytes on the wire by sending the bucket as f16.
///
/// Where we differ from PyTorch: the Reducer always divides gradients by the world size as
/// it copies them into the bucket (pre-division), with or without a hook, so a hook only
/// sums. (PyTorch leaves the division to a registered hook.)
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/dist/work.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// What a hook sees: one bucket, already holding every gradient of its parameters divided
/// by the world size. PyTorch's dist.GradBucket.
struct GradBucket {
  std::size_t index = 0;  ///< the bucket's index (launch order)
  /// The flat bucket: the gradients one after another. The hook's result must end up here.
  Tensor buffer;
  /// The parameters' names, in bucket order (for hooks that treat some specially).
  std::vector<std::string> parameter_names;
  /// True for the last bucket of the backward (the one launched last).
  bool is_last = false;
};

/// The hook's communication in flight. wait() blocks until the bucket buffer holds the
/// reduced result (then() runs the finishing step, e.g. decompression, on the waiting thread).
struct CommFuture {
  dist::Work work;             ///< the collective in flight
  std::function<void()> then;  ///< runs once after it completes (may be empty)
  /// Blocks until the bucket holds the result; runs `then` the first time.
  void wait() {
    work.wait();
    if (then) {
      then();
      then = nullptr;
    }
  }
  /// True once the collective has finished (`then` may still be pending). Never blocks.
  bool is_completed() const { return work.is_completed(); }
};

/// A communication hook: starts the reduction of one bucket over the group's ranks.
using CommHook = std::function<CommFuture(dist::ProcessGroup&, GradBucket&)>;

/// The default: all-reduce (sum) the bucket in place; the gradients were pre-divided, so the
/// sum is the average.
CommFuture allreduce_hook(dist::ProcessGroup& group, GradBucket& bucket);
/// Casts the bucket to f16, all-reduces that, and casts the sum back into the bucket: half
/// the bytes, at the price of f16 rounding (about 3 decimal digits) of every gradient.
CommFuture fp16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket);

}  // namespace mgpu::parallel
