/// @file train_report.h
/// @brief What lesson 05's program sets up and prints around its training loop: its own
/// flags, the set-up lines (model, buckets), the rebuilt buckets, and the sample-order
/// check behind --no-set-epoch. Program-only: the tests do not use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/models.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/parallel/all.h"

namespace mgpu::lesson05 {

namespace par = mgpu::parallel;

/// The program's own flags, beside the shared ones.
struct DdpFlags {
  std::optional<double> bucket_cap_mb;  // not given: PyTorch's 25 MiB, and 1 MiB for the first
  bool find_unused = false, no_broadcast_buffers = false;
  bool no_sampler = false;    // the pitfall: every rank reads everything in the same order
  bool no_set_epoch = false;  // the pitfall: every epoch repeats the first one's order
  std::string comm_hook = "allreduce";
};

/// Adds the DDP flags to `cli`.
inline void add_ddp_flags(CLI::App& cli, DdpFlags& f) {
  cli.add_option("--bucket-cap-mb", f.bucket_cap_mb,
                 "cap of every bucket in MiB (not given: 25, and 1 for the first)")
      ->check(app::non_negative_real());
  cli.add_flag("--no-set-epoch", f.no_set_epoch,
               "do not call sampler.set_epoch(e) (a common pitfall: every epoch then repeats "
               "the first epoch's order)");
  cli.add_flag("--find-unused-parameters", f.find_unused,
               "mark parameters that got no gradient ready at the end of backward");
  cli.add_flag("--no-distributed-sampler", f.no_sampler,
               "every rank reads the whole training set in the same order (the classic "
               "mistake, to measure it)");
  cli.add_flag("--no-broadcast-buffers", f.no_broadcast_buffers,
               "do not copy rank 0's buffers (BatchNorm statistics) before each forward");
  cli.add_option("--comm-hook", f.comm_hook, "allreduce or fp16 (compress buckets to f16)")
      ->check(CLI::IsMember({"allreduce", "fp16"}))->capture_default_str();
}

/// DDP's options from the flags.
inline par::DDPOptions ddp_options(const DdpFlags& f) {
  par::DDPOptions o;
  o.bucket_cap_mb = f.bucket_cap_mb;
  o.find_unused_parameters = f.find_unused;
  o.broadcast_buffers = !f.no_broadcast_buffers;
  return o;
}

/// Rank 0's set-up lines: the model, the buckets of the first iteration; the batch line
/// (printed by the run) warns when there is no DistributedSampler.
inline void print_setup(const app::Options& opt, const DdpFlags& f, nn::Module& model,
                        const optim::Optimizer& optimizer, par::DistributedDataParallel& ddp,
                        app::Run& run) {
  dist::log0(app::model_line(opt.model, model.num_parameters()), "; ", optimizer.describe(), ", ", opt.schedule,
             " schedule over ", opt.epochs, " epochs; comm hook: ", f.comm_hook);
  dist::log0(ddp.describe(), f.find_unused ? "" : " (first iteration: one bucket; "
             "rebuilt in gradient-ready order before the second)", "\n", ddp.bucket_summary());
  if (f.no_sampler) run.set_batch_note("no DistributedSampler: every rank sees the same batches!");
}

/// Says so when an epoch visits the samples in the first epoch's order (set_epoch forgotten).
class RepeatedOrderCheck {
 public:
  void at_epoch_start(int epoch, const par::DistributedSampler& sampler, const DdpFlags& f) {
    if (f.no_sampler) return;  // the loader does not use the sampler then
    if (epoch == 0) {
      first_order_ = sampler.indices();
    } else if (sampler.indices() == first_order_) {
      dist::log0("epoch ", epoch + 1, ": the same sample order as epoch 1 (",
                 f.no_set_epoch ? "--no-set-epoch: " : "", "set_epoch was not called)");
    }
  }

 private:
  std::vector<std::int64_t> first_order_;  // this rank's sample order in epoch 1
};

/// The buckets DDP rebuilt after the first iteration, and the order that made them.
inline void log_rebuild(par::DistributedDataParallel& ddp, std::int64_t step) {
  std::string order;
  for (std::size_t v : ddp.reducer().rebuilt_from_order())
    order += " " + ddp.reducer().variables()[v]->name();
  dist::log0("buckets rebuilt before step ", step, "; rank 0's gradients became ready in the order:",
             order, "\n", ddp.bucket_summary());
}

}  // namespace mgpu::lesson05
