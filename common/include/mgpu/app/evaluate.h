/// @file evaluate.h
/// @brief Accuracy counting and the evaluation pass of every program.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "mgpu/data/dataloader.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/nn/module.h"
#include "mgpu/tensor.h"

namespace mgpu::app {

/// How many rows of logits [N, C] have their largest value at labels[row] (labels [N], i64,
/// on any device). Copies the predictions to the host, so it waits for the device.
std::int64_t count_correct(const Tensor& logits, const Tensor& labels);

/// Every rank's `values` summed elementwise (one all_reduce on `group`, a CPU group; f64,
/// so counts stay exact): how per-rank sums of losses and counts reach rank 0.
std::vector<double> sum_over_ranks(dist::ProcessGroup& group, const std::vector<double>& values);

/// The result of an evaluation pass.
struct EvalResult {
  double loss = 0;           ///< mean cross-entropy per sample
  double accuracy = 0;       ///< fraction classified right, in [0, 1]
  std::int64_t samples = 0;  ///< samples seen (over every rank when summed)
};

/// One pass over `loader` (start_epoch(0), then every batch): logits = forward(inputs), the
/// batch's mean cross-entropy weighted by its size, and count_correct. Labels are moved to
/// the logits' device. With `sum_over`, every rank's sums are added up (one all_reduce on
/// that CPU group) before the means are taken, so each rank can evaluate its own part of
/// the test set. Leaves the model's mode alone: see the Module overload.
EvalResult evaluate(const std::function<Tensor(const Tensor&)>& forward, data::DataLoader& loader,
                    dist::ProcessGroup* sum_over = nullptr);

/// As above with model.forward, in evaluation mode (model.eval(); model.train() after).
EvalResult evaluate(nn::Module& model, data::DataLoader& loader,
                    dist::ProcessGroup* sum_over = nullptr);

}  // namespace mgpu::app
