/// @file data.h
/// @brief The data of a program: the --data sets, checked, and their loaders.
#pragma once

#include <cstdint>
#include <memory>

#include "mgpu/app/flags.h"
#include "mgpu/data/dataloader.h"
#include "mgpu/data/dataset.h"
#include "mgpu/data/sampler.h"
#include "mgpu/dist/process_group.h"

namespace mgpu::app {

/// The training and test sets of --data, and how many training samples a run uses.
struct Data {
  std::shared_ptr<data::Dataset> train;  ///< the training set
  std::shared_ptr<data::Dataset> test;   ///< the test set
  std::int64_t train_samples = 0;  ///< --train-samples, or the whole training set
};

/// Opens opt.data's training and test sets (seeded by opt.seed when synthetic). Refuses,
/// with one line that says what to do, an empty set, samples with no features, and a
/// --train-samples outside [0, training set size]. Rank 0 prints "data: ..." lines.
Data open_data(const Options& opt);

/// The training loader: batches of opt.batch_size on `device` from the first
/// data.train_samples samples, reshuffled every epoch by (opt.seed, epoch), or in the order
/// of `sampler` when one is given. `drop_last` drops a last, smaller batch.
std::unique_ptr<data::DataLoader> train_loader(const Data& data, const Options& opt,
                                               const Device& device, bool drop_last = false,
                                               std::shared_ptr<const data::Sampler> sampler = nullptr);

/// The test loader: the whole test set in order, batches of `batch_size`. With
/// `split_over`, rank r of that group takes samples r, r + W, r + 2W, ... (W ranks, no
/// padding), so every test sample is counted exactly once when the ranks' counts are summed
/// (evaluate(..., split_over)).
std::unique_ptr<data::DataLoader> test_loader(const Data& data, const Device& device,
                                              std::int64_t batch_size,
                                              dist::ProcessGroup* split_over = nullptr);

}  // namespace mgpu::app
