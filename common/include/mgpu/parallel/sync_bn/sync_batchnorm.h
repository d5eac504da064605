/// @file sync_batchnorm.h
/// @brief SyncBatchNorm: batch normalisation with statistics over every rank's batch
/// (torch.nn.SyncBatchNorm), and convert_sync_batchnorm.
///
/// Under DDP each rank sees only its own few samples; BatchNorm normalises with the
/// statistics of those. SyncBatchNorm normalises with the statistics of the whole world's
/// batch: one all_gather of every rank's [mean, invstd, count] in the forward, one
/// all_reduce of [sum_dy, sum_dy_xmu] in the backward (sync_batchnorm_steps.h).
///
///     auto model = nn::make_model("cnn");
///     auto synced = parallel::convert_sync_batchnorm(model);   // BatchNorm2d -> SyncBatchNorm
///     parallel::DistributedDataParallel ddp(synced, dist::default_group());
///
/// As in PyTorch: the same parameters ("weight", "bias") and buffers ("running_mean",
/// "running_var", "num_batches_tracked") as BatchNorm; momentum may be none (a cumulative
/// average); in eval mode, or with a group of one rank, it is plain BatchNorm with no
/// communication; ranks may have different batch sizes, an empty one included.
/// Where we differ (see lessons/06_sync_batchnorm/README.md): CPU tensors are synchronised
/// too (PyTorch needs a GPU); a world whose whole batch has 0 or 1 value per channel is an
/// error on every rank (PyTorch divides by zero); without a group, a world of more than one
/// rank needs the default group (PyTorch silently falls back to local statistics).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/layer.h"
#include "mgpu/parallel/sync_bn/sync_batchnorm_steps.h"

namespace mgpu::parallel {

namespace detail {
/// What SyncBatchNorm keeps of each forward for its backward.
struct SyncBatchNormSaved {
  Tensor x, mean, invstd;
  std::int64_t count = 0;
  dist::ProcessGroup* group = nullptr;  // null: the forward was local
};
}  // namespace detail

/// Batch normalisation of inputs [N, C, ...] with statistics over every rank of a group.
class SyncBatchNorm : public nn::Layer<SyncBatchNorm, detail::SyncBatchNormSaved> {
 public:
  /// num_features channels; eps, momentum (std::nullopt: cumulative average), affine and
  /// track_running_stats as in PyTorch. `process_group` (not owned; it must outlive the
  /// layer) is the group to synchronise over; null means the default group
  /// (dist::init_process_group), or no synchronisation in a world of one rank.
  explicit SyncBatchNorm(std::int64_t num_features, double eps = 1e-5,
                         std::optional<double> momentum = 0.1, bool affine = true,
                         bool track_running_stats = true,
                         dist::ProcessGroup* process_group = nullptr);

  /// Training with a group of 2+ ranks: the world's statistics (one all_gather); otherwise
  /// plain BatchNorm. Keeps what backward needs in training mode.
  Tensor forward(const Tensor& x) override;
  /// dx from dy; adds this rank's grad_weight and grad_bias (one all_reduce when the
  /// forward was synchronised).
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// C, the number of channels.
  std::int64_t num_features() const { return features_; }
  /// Added to the variance before the square root.
  double eps() const { return eps_; }
  /// Weight of a new batch in the running statistics; std::nullopt: 1/num_batches_tracked.
  std::optional<double> momentum() const { return momentum_; }
  /// Whether there is a learned scale and shift.
  bool affine() const { return affine_; }
  /// Whether running statistics are kept (and used in eval mode).
  bool track_running_stats() const { return track_; }
  /// gamma [C]; throws when affine is false.
  nn::Parameter& weight();
  /// beta [C]; throws when affine is false.
  nn::Parameter& bias();
  /// Running mean [C]; throws when track_running_stats is false. Assignable: converting a
  /// BatchNorm shares its buffer by assigning it here.
  Tensor& running_mean();
  /// Running unbiased variance [C]; throws when track_running_stats is false.
  Tensor& running_var();
  /// Training forwards so far, an i64 scalar; throws when track_running_stats is false.
  Tensor& num_batches_tracked();
  /// The group set at construction (null: the default group, see the constructor).
  dist::ProcessGroup* process_group() const { return group_; }
  /// The group a training forward synchronises over now, or null for none (a world of 1).
  dist::ProcessGroup* sync_group() const;

  /// Told about each synchronised step: what it was ("stats + all_gather" in the forward,
  /// "sums + all_reduce + dx" in the backward), when it began and ended (parallel::clock_s()
  /// seconds, the host's time: on a GPU the step has waited for its collective), and the
  /// bytes its collective delivered to this rank. For traces; null (the default): nothing.
  using StepObserver = std::function<void(const char* what, double begin_s, double end_s,
                                          std::int64_t bytes)>;
  /// Sets (or, with null, clears) the observer. Clones keep it.
  void set_step_observer(StepObserver observer) { observer_ = std::move(observer); }

 protected:
  // The three cross-rank steps. Lesson 06 replaces them with the learner's versions.
  /// Step 1: see parallel::gather_batch_stats.
  virtual Tensor gather_stats(const Tensor& x, dist::ProcessGroup& group);
  /// Step 2: see parallel::batch_norm_gather_stats_with_counts.
  virtual GlobalBatchStats merge_stats(const Tensor& gathered, Tensor& running_mean,
                                       Tensor& running_var, double momentum);
  /// The backward: see parallel::sync_batch_norm_backward.
  virtual SyncBatchNormGrads backward_sync(const Tensor& grad_out, const Tensor& x,
                                           const Tensor& mean, const Tensor& invstd,
                                           const Tensor& weight, std::int64_t count,
                                           dist::ProcessGroup& group);

 private:
  using Saved = detail::SyncBatchNormSaved;
  void check_input(const Tensor& x);
  double advance_batch_count();  // num_batches_tracked += 1; returns the momentum factor
  Tensor forward_local(const Tensor& x, bool batch_stats, double factor);
  Tensor forward_sync(const Tensor& x, dist::ProcessGroup& group, double factor);

  std::int64_t features_;
  double eps_;
  std::optional<double> momentum_;
  bool affine_, track_;
  dist::ProcessGroup* group_;
  StepObserver observer_;
  std::size_t weight_ = 0, bias_ = 0;
};

/// Replaces every BatchNorm1d/BatchNorm2d in `module`'s tree by a SyncBatchNorm with the
/// same num_features, eps, momentum and affine, the same training mode, device and dtype,
/// sharing the BatchNorm's parameters (values and gradients) and running buffers. Returns
/// the root: `module` itself, changed in place, or a new SyncBatchNorm when `module` is a
/// BatchNorm. Convert before wrapping the model in DDP (DDP registers hooks on the
/// parameters it sees). A module must reach its children through the registry
/// (children(), child_at) for a replacement to take effect. Lesson 06's task 4 defines it
/// (the library is built with solutions/06_sync_batchnorm/convert.cpp).
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   dist::ProcessGroup* process_group = nullptr);

}  // namespace mgpu::parallel
