/// @file sync_bn_lesson.h
/// @brief Lesson 06's contract: the pieces of SyncBatchNorm you write. The graded tests
/// compile against exactly these declarations.
///
/// The library's parallel::SyncBatchNorm (mgpu/parallel/sync_batchnorm.h) holds the rest:
/// the parameters and buffers, momentum and num_batches_tracked, eval mode and the world
/// of one rank, the local per-channel kernels (nn::batch_norm_stats, batch_norm_apply,
/// batch_norm_backward_reduce / _apply). Your pieces are its cross-rank steps:
///
///   task 1  gather_batch_stats                   this rank's [mean, invstd, count], one
///                                                all_gather (empty batches included)
///   task 2  batch_norm_gather_stats_with_counts  merge the rows into the world's mean and
///                                                variance; update the running statistics
///   task 3  sync_batch_norm_backward             the local sums, one all_reduce, dx
///   task 4  convert_sync_batchnorm               BatchNorm -> your SyncBatchNorm in a tree
///
/// lesson06::SyncBatchNorm is the library's layer with your steps 1-3; your
/// convert_sync_batchnorm builds it, and the program `train --sync-bn` uses it.
#pragma once

#include <cstdint>
#include <memory>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/sync_batchnorm.h"
#include "mgpu/parallel/sync_batchnorm_steps.h"

namespace mgpu::lesson06 {

using parallel::GlobalBatchStats;
using parallel::SyncBatchNormGrads;

// ---- Task 1 (gather_stats.cpp) -------------------------------------------------------------

/// Returns [W, 2C+1] in the statistics dtype (f64 for f64 input, f32 otherwise) on x's
/// device: row r = rank r's [mean (C) | invstd (C) | count], where invstd = 1/sqrt(biased
/// var + eps) and count = N*S, the values per channel. A rank with N = 0 sends zeros
/// (count 0) and still calls the collective. One all_gather. See
/// parallel::gather_batch_stats.
Tensor gather_batch_stats(const Tensor& x, double eps, dist::ProcessGroup& group);

// ---- Task 2 (merge_stats.cpp) --------------------------------------------------------------

/// Merges the gathered rows, in rank order, skipping count-0 rows, into the world's mean,
/// invstd and count (Chan et al.'s parallel variance); updates running_mean and
/// running_var when they are defined, with the world's mean and the world's UNBIASED
/// variance; throws when the world's count is 0 or 1. No communication. See
/// parallel::batch_norm_gather_stats_with_counts.
GlobalBatchStats batch_norm_gather_stats_with_counts(const Tensor& gathered, Tensor& running_mean,
                                                     Tensor& running_var, double momentum,
                                                     double eps);

// ---- Task 3 (sync_backward.cpp) ------------------------------------------------------------

/// dx with the world's sum_dy and sum_dy_xmu (one all_reduce of both) and the world's
/// count; grad_weight and grad_bias from this rank's own sums. An empty rank all-reduces
/// zeros. See parallel::sync_batch_norm_backward.
SyncBatchNormGrads sync_batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Tensor& mean, const Tensor& invstd,
                                            const Tensor& weight, std::int64_t count,
                                            dist::ProcessGroup& group);

// ---- Task 4 (convert.cpp) ------------------------------------------------------------------

/// Every BatchNorm1d/2d in the tree becomes a lesson06::SyncBatchNorm sharing its
/// parameters and buffers (see parallel::convert_sync_batchnorm for the whole contract).
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   dist::ProcessGroup* process_group = nullptr);

// ---- Your layer --------------------------------------------------------------------------

/// The library's SyncBatchNorm with your tasks 1-3 as its cross-rank steps.
class SyncBatchNorm : public parallel::SyncBatchNorm {
 public:
  using parallel::SyncBatchNorm::SyncBatchNorm;
  /// A deep copy that is again a lesson06::SyncBatchNorm.
  std::shared_ptr<nn::Module> clone() const override {
    auto copy = std::shared_ptr<SyncBatchNorm>(new SyncBatchNorm(*this));
    copy->clear_saved();
    return copy;
  }

 protected:
  /// Copies everything (clone() then drops the saved contexts).
  SyncBatchNorm(const SyncBatchNorm&) = default;
  Tensor gather_stats(const Tensor& x, dist::ProcessGroup& group) override {
    return gather_batch_stats(x, eps(), group);
  }
  GlobalBatchStats merge_stats(const Tensor& gathered, Tensor& running_mean, Tensor& running_var,
                               double momentum) override {
    return batch_norm_gather_stats_with_counts(gathered, running_mean, running_var, momentum,
                                               eps());
  }
  SyncBatchNormGrads backward_sync(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                   const Tensor& invstd, const Tensor& weight, std::int64_t count,
                                   dist::ProcessGroup& group) override {
    return sync_batch_norm_backward(grad_out, x, mean, invstd, weight, count, group);
  }
};

}  // namespace mgpu::lesson06
