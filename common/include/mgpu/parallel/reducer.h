/// @file reducer.h
/// @brief Reducer: turns grad-ready hooks into bucketed, overlapped all-reduces (c10d's Reducer).
///
/// The life of a gradient under DDP:
///  1. a layer's backward adds to `param.grad` and fires the parameter's grad-ready hook;
///  2. the hook (mark_variable_ready) copies the gradient, divided by the world size, into
///     its slot of a bucket and counts the bucket's pending gradients down;
///  3. when a bucket's count reaches zero it is launched: its comm hook starts an all-reduce
///     on the group's communication thread, and backward goes on computing meanwhile.
///     Buckets launch strictly in index order (every rank must issue the same collectives
///     in the same order), so a full bucket waits until all buckets before it are launched;
///  4. after backward, finalize_backward waits for every bucket and copies the averaged
///     values back into `param.grad`, where the optimizer finds them.
///
/// mark_variable_ready and finalize_backward are virtual so that lesson 05 can supply its
/// own; everything else is shared.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/parameter.h"
#include "mgpu/parallel/comm_hook.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// Seconds on a steady clock: the time base of every timing the Reducer and DDP record.
double clock_s();

/// How a Reducer behaves.
struct ReducerOptions {
  /// Parameters whose hook did not fire in a backward are marked ready at its end (and
  /// their gradients left untouched when no rank used them). Costs one extra small
  /// all-reduce per step. Without it, such a parameter makes the next forward throw.
  bool find_unused_parameters = false;
  /// Watch each bucket's communication from a helper thread, so that timings() holds exact
  /// completion times (for traces and benchmarks). Without it, completion is only checked
  /// at each grad-ready hook and at the end of backward.
  bool record_timings = false;
};

/// One bucket's communication in the last synchronized backward.
struct BucketTiming {
  std::size_t bucket = 0;  ///< which bucket
  std::size_t bytes = 0;   ///< its size
  double launch_s = 0;  ///< clock_s() when the comm hook was called
  /// clock_s() when it completed: exact with ReducerOptions::record_timings; otherwise the
  /// first time it was seen complete (at a grad-ready hook or a wait of finalize_backward).
  double done_s = 0;
};

/// Owns the buckets of one DDP model and reduces its gradients across the group's ranks
/// during backward (see the file comment for the steps).
class Reducer {
 public:
  /// `params`: the parameters to synchronize (all require grad, all on one device), in
  /// registration order. `bucket_indices`: the buckets as indices into `params`, each
  /// parameter in exactly one bucket, one dtype per bucket (compute_bucket_assignment_by_size).
  /// Adds a grad-ready hook to every parameter (removed again by the destructor).
  Reducer(std::vector<nn::Parameter*> params, std::vector<std::vector<std::size_t>> bucket_indices,
          dist::ProcessGroup& group, ReducerOptions options = {});
  virtual ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Replaces the default allreduce_hook. Call before the first backward.
  void register_comm_hook(CommHook hook);

  /// Arms the hooks for the coming backward (DDP's forward calls it when gradients will be
  /// synchronized). Throws if the previous backward left its reduction unfinished, naming
  /// the parameters that got no gradient and the fix.
  void prepare_for_backward();

  /// The grad-ready hook of variable `index` (lesson 05, task 2). Does nothing unless
  /// prepare_for_backward armed the hooks.
  virtual void mark_variable_ready(std::size_t index);
  /// Called once the wrapped module's backward has returned (lesson 05, task 3): waits for
  /// every bucket and writes the averaged gradients back. Does nothing unless armed.
  virtual void finalize_backward();

  // ---- what happened, for tests, traces and printing ------------------------------------
  /// Number of buckets.
  std::size_t num_buckets() const { return buckets_.size(); }
  /// Indices (into variables()) of bucket b's parameters, in bucket order.
  const std::vector<std::size_t>& bucket_variables(std::size_t b) const;
  /// Bytes of bucket b's buffer.
  std::size_t bucket_bytes(std::size_t b) const;
  /// The synchronized parameters ("variables" in c10d), in registration order.
  const std::vector<nn::Parameter*>& variables() const { return params_; }
  /// Buckets launched since the last prepare_for_backward, in launch order.
  const std::vector<std::size_t>& launch_order() const { return launch_order_; }
  /// Communication timing of each launched bucket since the last prepare_for_backward
  /// (complete once finalize_backward has returned).
  std::vector<BucketTiming> timings() const;
  /// True between prepare_for_backward and finalize_backward.
  bool armed() const { return expect_hooks_; }
  /// The group the gradients are reduced over.
  dist::ProcessGroup& group() const { return group_; }
  /// The options it was built with.
  const ReducerOptions& options() const { return options_; }

 protected:
  /// One bucket: a flat buffer holding several parameters' gradients one after another.
  struct Bucket {
    std::vector<std::size_t> variables;  ///< indices into params_
    std::vector<std::int64_t> offsets;   ///< where each variable's gradient starts in buffer
    Tensor buffer;                       ///< the flat bucket: one dtype, on the params' device
    std::size_t pending = 0;             ///< gradients of this bucket not yet final
    CommFuture future;                   ///< the communication in flight, once launched
  };
  /// Where variable v lives: buckets_[bucket], slot `slot` of its variables.
  struct Locator {
    std::size_t bucket = 0;  ///< index into buckets_
    std::size_t slot = 0;    ///< position among the bucket's variables
  };

  // ---- helpers for mark_variable_ready / finalize_backward --------------------------------
  /// The part of variable v's bucket buffer that holds its gradient, shaped like it (a view:
  /// writing it writes the bucket).
  Tensor bucket_view(std::size_t v) const;
  /// Starts bucket b's communication through the comm hook; records launch order and time.
  void launch_bucket(std::size_t b);
  /// Blocks until bucket b's communication is complete (and decompressed, for hooks that do).
  void wait_bucket(std::size_t b);
  /// Leaves the reduction unfinished: waits for the launched buckets and remembers the
  /// parameters that never became ready, so that the next prepare_for_backward throws.
  void record_unfinished_reduction();
  /// For find_unused_parameters: all-reduces (max) the per-variable "my hook fired" flags.
  /// Returns, per variable, whether any rank used it. A collective: every rank calls it.
  std::vector<char> sync_used_variables();

  std::vector<nn::Parameter*> params_;     ///< the synchronized parameters
  std::vector<Bucket> buckets_;            ///< in launch order
  std::vector<Locator> locators_;          ///< per variable
  std::vector<char> variable_ready_;       ///< per variable: gradient final this backward
  std::vector<char> variable_used_;        ///< per variable: its hook fired this backward
  std::size_t next_bucket_ = 0;            ///< the next bucket to launch (index order)
  bool expect_hooks_ = false;              ///< armed by prepare_for_backward
  double world_size_ = 1;                  ///< ranks in the group (the divisor)
  dist::ProcessGroup& group_;              ///< where the all-reduces go
  ReducerOptions options_;                 ///< as constructed

 private:
  void on_grad_ready(std::size_t v);
  void poll_in_flight();
  void watch_loop();

  CommHook comm_hook_;
  std::vector<std::size_t> hook_handles_;
  std::vector<std::size_t> launch_order_;
  std::vector<std::string> unfinished_;    ///< names of parameters that never became ready

  // Timings, shared with the watcher thread (record_timings) under timing_mutex_.
  mutable std::mutex timing_mutex_;
  std::condition_variable timing_cv_;
  std::vector<BucketTiming> timings_;
  struct Watched {
    std::size_t timing = 0;      ///< index into timings_
    std::uint64_t generation = 0;  ///< which backward it belongs to
    dist::Work work;
  };
  std::deque<Watched> watch_queue_;
  std::uint64_t generation_ = 0;
  bool watch_stop_ = false;
  std::thread watcher_;
};

}  // namespace mgpu::parallel
