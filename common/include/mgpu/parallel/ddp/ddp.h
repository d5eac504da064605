/// @file ddp.h
/// @brief DistributedDataParallel: data parallelism across ranks, one model replica each
/// (torch.nn.parallel.DistributedDataParallel).
///
/// Each rank runs the whole model on its own share of the batch. Construction checks that
/// every rank built the same model and copies rank 0's weights to all; from then on each
/// backward averages the gradients across ranks, bucket by bucket, while backward is still
/// running. Every rank then takes the same optimizer step and the replicas stay identical.
///
///     auto model = std::make_shared<nn::Sequential>(...);  model->to(device);
///     parallel::DistributedDataParallel ddp(model, dist::default_group());
///     Tensor logits = ddp.forward(x);               // buffers from rank 0, hooks armed
///     loss.forward(logits, y);
///     ddp.backward(loss.backward());                // gradients averaged over ranks
///     optimizer.step();
///
/// Buckets, as in PyTorch (torch/nn/parallel/distributed.py): with find_unused_parameters
/// off the first iteration runs with one bucket per dtype and records the order in which
/// gradients become ready; the second forward rebuilds the buckets once, in that order
/// (rank 0's), with the caps below. With find_unused_parameters the buckets are built at
/// construction from the registration order, reversed, and never rebuilt.
///
/// Where we differ from PyTorch: there is no autograd graph, so DDP has a backward() that
/// runs the wrapped module's backward and then finishes the reduction, and unused
/// parameters are found at the end of backward, not after forward.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/io/state_dict.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/ddp/comm_hook.h"
#include "mgpu/parallel/ddp/reducer.h"

namespace mgpu::parallel {

/// How DistributedDataParallel behaves (PyTorch's constructor arguments).
struct DDPOptions {
  /// Cap of a bucket in MiB (PyTorch's bucket_cap_mb). Not given: 25 MiB, and the first
  /// bucket of each dtype 1 MiB so that the first all-reduce starts early. Given: every
  /// bucket, the first included, has this cap.
  std::optional<double> bucket_cap_mb;
  /// Broadcast rank 0's buffers (BatchNorm running statistics) before every forward.
  bool broadcast_buffers = true;
  /// See ReducerOptions::find_unused_parameters.
  bool find_unused_parameters = false;
  /// See ReducerOptions::gradient_as_bucket_view.
  bool gradient_as_bucket_view = false;
};

/// When the phases of the last step happened (clock_s() seconds), for traces and benches.
struct StepTimeline {
  double forward_begin = 0;  ///< DDP's forward was called
  double forward_end = 0;    ///< it returned
  double backward_begin = 0; ///< DDP's backward was called
  double backward_end = 0;   ///< the wrapped module's backward returned
  double reduce_end = 0;     ///< finalize_backward returned: gradients averaged
  bool synchronized = false; ///< false under no_sync()
  bool rebuilt_buckets = false;  ///< this step's forward rebuilt the buckets
};

/// Wraps a model so that its gradients are averaged across all ranks during backward.
class DistributedDataParallel : public nn::Module {
 public:
  /// Wraps `module` (already on this rank's device). A collective: every rank constructs
  /// its DDP at the same point. Throws on every rank when the ranks' models differ.
  /// The module is registered as the child "module", so parameter names gain the prefix
  /// "module." as in PyTorch (save ddp.module()'s state to get the plain names).
  DistributedDataParallel(std::shared_ptr<nn::Module> module, dist::ProcessGroup& group,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  /// Rebuilds the buckets once (second training forward), broadcasts buffers (if
  /// enabled), arms the reducer (unless under no_sync or in eval mode), runs the module's
  /// forward.
  Tensor forward(const Tensor& x) override;
  /// The module's backward, then the end of the reduction: waits for every bucket and
  /// writes the averaged gradients into param.grad.
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<nn::Module> clone() const override;
  std::string describe() const override;

  /// The wrapped model.
  nn::Module& module() { return *module_; }
  /// The wrapped model, shared.
  std::shared_ptr<nn::Module> module_ptr() { return module_; }
  /// The Reducer that owns the buckets.
  Reducer& reducer() { return *reducer_; }
  /// The group the gradients are averaged over.
  dist::ProcessGroup& process_group() { return group_; }
  /// The options it was built with.
  const DDPOptions& options() const { return options_; }

  /// Replaces the built-in all-reduce of each bucket (e.g. fp16_compress_hook); once only.
  /// See Reducer::register_comm_hook.
  void register_comm_hook(CommHook hook) { reducer_->register_comm_hook(std::move(hook)); }
  /// Buffers <- rank 0's now (e.g. before evaluating: each rank's BatchNorm statistics
  /// moved with its own last batch). A collective.
  void sync_buffers();

  /// While the returned guard lives, forward/backward only accumulate gradients locally:
  /// no collective for the gradients. The next synchronized backward reduces the sum.
  ///     { auto guard = ddp.no_sync(); ddp.forward(x1); ...; ddp.backward(g1); }
  ///     ddp.forward(x2); ...; ddp.backward(g2);   // reduces g1 + g2
  class NoSyncGuard {
   public:
    /// Turns gradient synchronization off until the guard is destroyed.
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(&ddp), previous_(ddp.require_grad_sync_) {
      ddp.require_grad_sync_ = false;
    }
    ~NoSyncGuard() {
      if (ddp_) ddp_->require_grad_sync_ = previous_;
    }
    /// Moves the duty to restore the setting (no_sync() returns by value).
    NoSyncGuard(NoSyncGuard&& o) noexcept : ddp_(o.ddp_), previous_(o.previous_) { o.ddp_ = nullptr; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  /// See NoSyncGuard.
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// One line per bucket: index, size, parameters in bucket order. For programs to print.
  std::string bucket_summary();
  /// What decides the buckets of the coming steps, for a checkpoint's extra state: after
  /// the rebuild, its buckets ("bucket_sizes": i64 [B], "bucket_variables": i64, every
  /// bucket's variable indices one after another); between the first backward and the
  /// rebuild, the recorded ready order ("ready_order"); else empty. PyTorch keeps no such
  /// state: a resumed PyTorch run starts again with one bucket, and on 3 or more ranks its
  /// first all-reduce may then sum in another order than the uninterrupted run's (lesson 07).
  io::StateDict bucket_state_dict() const;
  /// Takes bucket_state_dict() back (Reducer::adopt_rebuilt_buckets or adopt_ready_order);
  /// an empty dict changes nothing. Throws naming `where` on a state for another model.
  void load_bucket_state_dict(const io::StateDict& state, const std::string& where);
  /// The phases of the last forward/backward.
  const StepTimeline& last_step() const { return timeline_; }

 private:
  std::shared_ptr<nn::Module> module_;
  dist::ProcessGroup& group_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool require_grad_sync_ = true;
  StepTimeline timeline_;
};

}  // namespace mgpu::parallel
