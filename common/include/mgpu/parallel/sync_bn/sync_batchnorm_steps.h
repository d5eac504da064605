/// @file sync_batchnorm_steps.h
/// @brief The three cross-rank steps of SyncBatchNorm as plain functions (CPU and CUDA).
///
/// Forward in training, on every rank of the group:
///
///     Tensor rows = gather_batch_stats(x, eps, group);        // [W, 2C+1]: one all_gather
///     GlobalBatchStats g = batch_norm_gather_stats_with_counts(rows, running_mean,
///                                                              running_var, factor, eps);
///     y = nn::batch_norm_apply(x, g.mean, g.invstd, weight, bias);   // local, elementwise
///
/// Backward:
///
///     SyncBatchNormGrads d = sync_batch_norm_backward(dy, x, g.mean, g.invstd, weight,
///                                                     g.count, group);  // one all_reduce
///
/// These are the pieces of PyTorch's SyncBatchNorm autograd function
/// (torch/nn/modules/_functions.py) with the same names where PyTorch has one. Lesson 06
/// defines gather_batch_stats, batch_norm_gather_stats_with_counts and
/// sync_batch_norm_backward (tasks 1-3); the library is built with the reference,
/// solutions/06_sync_batchnorm/. Per-channel
/// tensors are in the statistics dtype: f32 for f32/f16/bf16 inputs, f64 for f64 inputs.
#pragma once

#include <cstdint>

#include "mgpu/dist/process_group.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// Step 1 of the forward: this rank's per-channel statistics, exchanged with one all_gather.
/// Returns [W, 2C+1] on x's device: row r holds rank r's mean (C values), invstd =
/// 1/sqrt(biased var + eps) (C values) and its count N*S (1 value). A rank whose batch is
/// empty (N = 0) sends a row of zeros, count 0, and still takes part in the collective, so
/// its peers never wait for it. A collective: every rank of `group` calls it.
Tensor gather_batch_stats(const Tensor& x, double eps, dist::ProcessGroup& group);

/// The world's statistics of one SyncBatchNorm forward.
struct GlobalBatchStats {
  Tensor mean;             ///< [C], over every rank's values
  Tensor invstd;           ///< [C], 1 / sqrt(biased variance + eps)
  std::int64_t count = 0;  ///< values per channel over the whole world: the sum of the counts
};

/// Step 2 of the forward (PyTorch's batch_norm_gather_stats_with_counts): merges the
/// gathered rows into the world's mean and biased variance with the parallel-variance
/// formula (Chan et al.), rank after rank, skipping rows with count 0 (empty batches).
/// Each row's variance is recovered from its invstd as 1/invstd^2 - eps.
/// When running_mean / running_var are defined (else they are left alone):
///     running_mean = (1 - momentum) * running_mean + momentum * mean
///     running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
/// with n the world's count (the unbiased variance). `momentum` is the factor for this
/// step (a cumulative average passes 1/num_batches_tracked). Throws, on every rank alike,
/// when the world's count is 0 or 1: one value per channel has no variance to normalise by.
/// Local: no communication.
GlobalBatchStats batch_norm_gather_stats_with_counts(const Tensor& gathered, Tensor& running_mean,
                                                     Tensor& running_var, double momentum,
                                                     double eps);

/// What the backward of SyncBatchNorm returns.
struct SyncBatchNormGrads {
  Tensor grad_input;   ///< dx, the shape of x
  Tensor grad_weight;  ///< [C] statistics dtype: this rank's sum(dy * xhat), undefined without weight
  Tensor grad_bias;    ///< [C] statistics dtype: this rank's sum(dy), undefined without weight
};

/// The backward: this rank's sum_dy = sum(dy) and sum_dy_xmu = sum(dy * (x - mean)) per
/// channel, one all_reduce(sum) of both (2C values), then
///     dx = (dy - sum_dy / n - (x - mean) * invstd^2 * sum_dy_xmu / n) * invstd * weight
/// with the world's sums and count n. grad_weight and grad_bias stay this rank's own sums:
/// DDP averages them like any other gradient. A rank with an empty batch all-reduces
/// zeros (and gets an empty dx and zero grad_weight / grad_bias). A collective.
SyncBatchNormGrads sync_batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                            const Tensor& mean, const Tensor& invstd,
                                            const Tensor& weight, std::int64_t count,
                                            dist::ProcessGroup& group);

/// The merge of step 2 without the running statistics: mean, biased variance and invstd
/// of the world from the gathered rows (a CPU loop in double, or one CUDA thread per
/// channel). `count` gets the world's count. Used by batch_norm_gather_stats_with_counts.
void merge_batch_stats(const Tensor& gathered, double eps, Tensor& mean, Tensor& var,
                       Tensor& invstd, std::int64_t& count);

}  // namespace mgpu::parallel
