/// @file reducer.h
/// @brief Reducer: turns grad-ready hooks into bucketed, overlapped all-reduces (c10d's Reducer).
///
/// The life of a gradient under DDP:
///  1. a layer's backward adds to `param.grad` and fires the parameter's grad-ready hook;
///  2. the hook (mark_variable_ready) copies the gradient into its slot of a bucket
///     (divided by the world size unless a comm hook is registered) and counts the
///     bucket's pending gradients down;
///  3. when a bucket's count reaches zero it is launched: the comm hook starts an all-reduce
///     on the group's communication thread, and backward goes on computing meanwhile.
///     Buckets launch strictly in index order (every rank must issue the same collectives
///     in the same order), so a full bucket waits until all buckets before it are launched;
///  4. after backward, finalize_backward waits for every bucket and copies the averaged
///     values back into `param.grad`, where the optimizer finds them;
///  5. once, before the second forward, rebuild_buckets regroups the buckets in the order
///     the gradients became ready in the first backward (rank 0's order, on every rank).
///
/// Steps 2, 4 and 5 (mark_variable_ready, finalize_backward, rebuild_buckets) are lesson
/// 05's tasks 2-4, defined in lessons/05_ddp/reducer_{mark_ready,finalize,rebuild}.cpp for
/// the learner's build of lesson 05 and in the same files of solutions/05_ddp/ for
/// everything else (the library, mgpu_dep, compiles that reference in). The rest is common/src/parallel/ddp/reducer.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/parameter.h"
#include "mgpu/parallel/comm_log.h"
#include "mgpu/parallel/ddp/bucket_assignment.h"
#include "mgpu/parallel/ddp/comm_hook.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// How a Reducer behaves (DistributedDataParallel's options, in bytes).
struct ReducerOptions {
  /// Parameters whose hook did not fire in a backward are marked ready at its end (and
  /// their gradients left untouched when no rank used them). Costs one extra small
  /// all-reduce per step, and the buckets are never rebuilt. Without it, such a parameter
  /// makes the next forward throw.
  bool find_unused_parameters = false;
  /// param.grad becomes a view into its bucket: no gradient-sized copy of the gradients
  /// exists besides the buckets (PyTorch's gradient_as_bucket_view).
  bool gradient_as_bucket_view = false;
  /// Cap of the first bucket of each dtype when the buckets are rebuilt.
  std::size_t first_bucket_cap_bytes = kDefaultFirstBucketCapBytes;
  /// Cap of every other bucket when the buckets are rebuilt.
  std::size_t bucket_cap_bytes = kDefaultBucketCapBytes;
};

/// Owns the buckets of one DDP model and reduces its gradients across the group's ranks
/// during backward (see the file comment for the steps).
class Reducer {
 public:
  /// `params`: the parameters to synchronize (all require grad, all on one device), in
  /// registration order. `bucket_indices`: the buckets as indices into `params`, each
  /// parameter in exactly one bucket, one dtype per bucket, in launch order. Adds a
  /// grad-ready hook to every parameter (removed again by the destructor).
  Reducer(std::vector<nn::Parameter*> params, std::vector<std::vector<std::size_t>> bucket_indices,
          dist::ProcessGroup& group, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Replaces the built-in all-reduce of each bucket (e.g. fp16_compress_hook). May be
  /// called once (a second call throws), before a backward. From then on the Reducer no
  /// longer divides the gradients by the world size: the hook does what it wants with the
  /// local sum.
  void register_comm_hook(CommHook hook);
  /// True once register_comm_hook was called.
  bool has_comm_hook() const { return static_cast<bool>(comm_hook_); }
  /// Records every bucket launch in `log` from now on (nullptr stops). The log must
  /// outlive its use.
  void set_comm_log(CommLog* log) { comm_log_ = log; }

  /// Lesson 05, task 4. Called by DDP's forward before prepare_for_backward, while a
  /// rebuild can still come (not rebuilt yet, find_unused_parameters off): once a backward
  /// has recorded the gradients' ready order, regroups the buckets in that order, rank 0's
  /// order on every rank, and returns true; otherwise returns false. Throws first if the previous backward left its
  /// reduction unfinished. A collective when it rebuilds.
  bool rebuild_buckets();
  /// Throws (naming the parameters and the fix) if the last backward was left unfinished.
  /// DDP's forward checks it on every training forward, as PyTorch's does.
  void ensure_prior_reduction_finished() const;
  /// Arms the hooks for the coming backward (DDP's forward calls it when gradients will be
  /// synchronized). Throws if the previous backward left its reduction unfinished, naming
  /// the parameters that got no gradient and the fix.
  void prepare_for_backward();
  /// Lesson 05, task 2: the grad-ready hook of variable `index`, while armed.
  void mark_variable_ready(std::size_t index);
  /// Lesson 05, task 3: called once the wrapped module's backward has returned: waits for
  /// every bucket and writes the averaged gradients back. Does nothing unless armed.
  void finalize_backward();

  // ---- what happened, for tests, traces and printing ------------------------------------
  /// Number of buckets.
  std::size_t num_buckets() const { return buckets_.size(); }
  /// Indices (into variables()) of bucket b's parameters, in bucket order.
  const std::vector<std::size_t>& bucket_variables(std::size_t b) const;
  /// Bytes of bucket b's buffer.
  std::size_t bucket_bytes(std::size_t b) const;
  /// Bucket b's flat buffer (with gradient_as_bucket_view, the grads are views into it).
  const Tensor& bucket_buffer(std::size_t b) const;
  /// The synchronized parameters ("variables" in c10d), in registration order.
  const std::vector<nn::Parameter*>& variables() const { return params_; }
  /// Buckets launched since the last prepare_for_backward, in launch order.
  const std::vector<std::size_t>& launch_order() const { return launch_order_; }
  /// The order in which gradients became ready in the backward the rebuild used (empty
  /// before the rebuild).
  const std::vector<std::size_t>& rebuilt_from_order() const { return rebuilt_from_order_; }
  /// True once rebuild_buckets has regrouped the buckets.
  bool has_rebuilt_buckets() const { return has_rebuilt_buckets_; }
  /// Every bucket's variables (indices into variables()), bucket by bucket.
  std::vector<std::vector<std::size_t>> bucket_indices() const;
  /// Takes `bucket_indices` as the buckets the rebuild made (a resumed run continues with
  /// the buckets the uninterrupted run had, so its all-reduces sum in the same order); no
  /// rebuild follows. Every rank must pass the same layout (every rank reads one file).
  void adopt_rebuilt_buckets(std::vector<std::vector<std::size_t>> bucket_indices);
  /// The gradients' ready order recorded for the coming rebuild: complete once a
  /// synchronized backward ran and the rebuild has not happened yet, else empty or partial.
  const std::vector<std::size_t>& recorded_ready_order() const { return grad_ready_order_; }
  /// Takes a complete recorded ready order back (saved between the first backward and the
  /// rebuild), so that the next forward rebuilds from it as the uninterrupted run did.
  void adopt_ready_order(std::vector<std::size_t> order);
  /// True between prepare_for_backward and finalize_backward.
  bool armed() const { return expect_hooks_; }
  /// The group the gradients are reduced over.
  dist::ProcessGroup& group() const { return group_; }
  /// The options it was built with.
  const ReducerOptions& options() const { return options_; }

 private:
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

  // ---- helpers the lesson's methods use (common/src/parallel/ddp/reducer.cpp) -----------------
  /// The part of variable v's bucket buffer that holds its gradient, shaped like it (a view:
  /// writing it writes the bucket).
  Tensor bucket_view(std::size_t v) const;
  /// Starts bucket b's communication through the comm hook (or the built-in all-reduce).
  void launch_bucket(std::size_t b);
  /// Blocks until bucket b's communication is complete (and decompressed, for hooks that do).
  void wait_bucket(std::size_t b);
  /// Leaves the reduction unfinished: waits for the launched buckets and remembers the
  /// parameters that never became ready, so that the next forward throws.
  void record_unfinished_reduction();
  /// For find_unused_parameters: all-reduces (max) the per-variable "my hook fired" flags.
  /// Returns, per variable, whether any rank used it. A collective: every rank calls it.
  std::vector<char> sync_used_variables();
  /// What compute_bucket_assignment_by_size needs to know about variable v.
  GradSpec grad_spec(std::size_t v) const;
  /// Every rank's `bucket_indices` <- rank 0's (broadcasts). A collective.
  void sync_bucket_indices(std::vector<std::vector<std::size_t>>& bucket_indices);
  /// (Re)creates the buckets: checks the assignment, allocates the buffers, points the
  /// grads into them with gradient_as_bucket_view.
  void initialize_buckets(std::vector<std::vector<std::size_t>> bucket_indices);
  /// The hook every parameter fires: records use and ready order, then mark_variable_ready.
  void on_grad_ready(std::size_t v);

  // ---- state the lesson's methods read and write --------------------------------------------
  std::vector<nn::Parameter*> params_;     ///< the synchronized parameters
  std::vector<Bucket> buckets_;            ///< in launch order
  std::vector<Locator> locators_;          ///< per variable
  std::vector<char> variable_ready_;       ///< per variable: gradient final this backward
  std::vector<char> variable_used_;        ///< per variable: its hook fired since the last finalize
  std::size_t next_bucket_ = 0;            ///< the next bucket to launch (index order)
  bool expect_hooks_ = false;              ///< armed by prepare_for_backward
  double world_size_ = 1;                  ///< ranks in the group (the divisor)
  dist::ProcessGroup& group_;              ///< where the all-reduces go
  ReducerOptions options_;                 ///< as constructed
  CommHook comm_hook_;                     ///< the registered hook; empty: built-in all-reduce
  /// Variables in the order their gradients became ready, recorded in every synchronized
  /// backward until the rebuild (find_unused_parameters off); the rebuild consumes it.
  std::vector<std::size_t> grad_ready_order_;
  bool has_rebuilt_buckets_ = false;       ///< set by rebuild_buckets, once

  // ---- bookkeeping ----------------------------------------------------------------------------
  CommLog* comm_log_ = nullptr;
  std::vector<std::size_t> hook_handles_;
  std::vector<std::size_t> launch_order_;
  std::vector<std::size_t> rebuilt_from_order_;
  std::vector<std::string> unfinished_;    ///< names of parameters that never became ready
};

}  // namespace mgpu::parallel
