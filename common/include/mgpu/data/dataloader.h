/// @file dataloader.h
/// @brief DataLoader: batches from a dataset, prepared ahead by a background thread.
///
/// While the model trains on batch k, a prefetch thread already gathers batch k+1 (reading
/// samples, normalising, packing them into one buffer). For a CUDA device the buffers are
/// pinned host memory and the batch goes to the GPU with an asynchronous copy on the
/// device's current stream: kernels queued after it wait for it, the host does not.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "mgpu/data/dataset.h"
#include "mgpu/data/sampler.h"
#include "mgpu/device.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"

namespace mgpu::data {

/// How a DataLoader batches and where it delivers.
struct DataLoaderOptions {
  std::int64_t batch_size = 64;  ///< samples per batch (the last may be smaller)
  bool shuffle = true;           ///< a new order every epoch (without a sampler)
  std::uint64_t seed = 0;        ///< seed of the shuffle
  /// Drop the last, smaller batch (keeps every step the same size).
  bool drop_last = false;
  /// Where batches are delivered.
  Device device = Device::cpu();
  /// Batches prepared ahead by the background thread; 0 prepares each one in next().
  int prefetch = 2;
};

/// One batch on the loader's device.
struct Batch {
  Tensor inputs;  ///< f32 [B, sample_shape...]
  Tensor labels;  ///< i64 [B]
  std::int64_t index = 0;  ///< position of the batch in its epoch
};

/// Batches of a dataset, prepared ahead by a background thread (see the file comment).
class DataLoader {
 public:
  /// Visits `dataset` in the order of `sampler`, or of RandomSampler(size, shuffle, seed)
  /// when none is given.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
             std::shared_ptr<const Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Begins epoch `epoch` (its order: sampler->indices(epoch)); stops an unfinished one.
  /// `first_batch` > 0 resumes the epoch there (a checkpoint's position): the batches
  /// before it are skipped, not read, and next() delivers batch `first_batch` first.
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);
  /// The next batch of the current epoch; false at its end.
  bool next(Batch& batch);

  /// Batches per epoch.
  std::int64_t num_batches() const;
  /// Samples visited per epoch (after drop_last).
  std::int64_t num_samples() const;
  /// The dataset batches are drawn from.
  const Dataset& dataset() const { return *dataset_; }
  /// The options it was built with.
  const DataLoaderOptions& options() const { return options_; }
  /// Seconds next() spent waiting for the prefetch thread in the current epoch: the
  /// "data wait" of a training step. Near zero when loading keeps up with training.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Slot;
  void produce(std::vector<std::int64_t> order, std::int64_t first, std::int64_t batches);
  void fill(Slot& slot, const std::vector<std::int64_t>& order, std::int64_t batch);
  void stop();
  Batch deliver(Slot& slot, std::int64_t batch);

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;
  std::int64_t sample_numel_ = 0;
  Shape sample_shape_;
  std::int64_t epoch_samples_ = 0;  // indices per epoch, before batching
  std::int64_t slot_rows_ = 0;      // rows of a slot: min(batch_size, epoch_samples_)

  std::vector<std::unique_ptr<Slot>> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<int> free_, ready_;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;

  std::vector<std::int64_t> order_;  // for prefetch = 0
  std::int64_t next_batch_ = 0, epoch_batches_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace mgpu::data
