/// @file comm_hook.h
/// @brief Communication hooks: how a full bucket is reduced across ranks (c10d's comm hooks).
///
/// The Reducer hands each full bucket to a hook; the hook starts the communication and
/// returns a CommFuture; finalize_backward() waits for it, then copies the bucket back into
/// the gradients. Without a registered hook the Reducer divides each gradient by the world
/// size as it copies it into the bucket and all-reduces (sums) the bucket itself. With a
/// registered hook it does not divide: the hook gets the local sum of the gradients and
/// decides (PyTorch's Note [DDP Communication Hook], torch/csrc/distributed/c10d/reducer.cpp).
/// The two built-in hooks divide themselves, before the all-reduce, as PyTorch's
/// default_hooks.py does ("to avoid overflow, especially for FP16").
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/dist/work.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// What a hook sees: one bucket (PyTorch's dist.GradBucket).
struct GradBucket {
  std::size_t index = 0;  ///< the bucket's index (launch order)
  /// The flat bucket: the gradients one after another, not divided by the world size. The
  /// hook's result (normally the average over ranks) must end up here.
  Tensor buffer;
  /// The parameters' names, in bucket order (for hooks that treat some specially).
  std::vector<std::string> parameter_names;
  /// True for the last bucket of the backward (the one launched last).
  bool is_last = false;
};

/// The hook's communication in flight. wait() blocks until the bucket buffer holds the
/// result (then() runs the finishing step, e.g. decompression, on the waiting thread).
struct CommFuture {
  dist::Work work;             ///< the collective in flight
  std::function<void()> then;  ///< runs once after it completes (may be empty)
  /// Blocks until the bucket holds the result; runs `then` the first time.
  void wait() {
    work.wait();
    if (then) {
      auto finish = std::move(then);
      then = nullptr;
      finish();
    }
  }
  /// True once the collective has finished (`then` may still be pending). Never blocks.
  bool is_completed() const { return work.is_completed(); }
};

/// A communication hook: starts the reduction of one bucket over the group's ranks.
using CommHook = std::function<CommFuture(dist::ProcessGroup&, GradBucket&)>;

/// PyTorch's allreduce_hook: divides the bucket by the world size, then all-reduces (sums)
/// it in place. The result equals DDP without a hook.
CommFuture allreduce_hook(dist::ProcessGroup& group, GradBucket& bucket);
/// PyTorch's fp16_compress_hook: casts the bucket to f16, divides it by the world size,
/// all-reduces that and casts the sum back into the bucket: half the bytes on the wire, at
/// the price of f16 rounding (about 3 decimal digits) of every gradient.
CommFuture fp16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket);

}  // namespace mgpu::parallel
