/// @file dataloader.h
/// @brief DataLoader: batches from a dataset, loaded by worker threads (PyTorch's
/// num_workers, prefetch_factor and pin_memory).
///
///   num_workers = 0   next() reads and packs each batch itself, in the training loop: the
///                     step waits for every sample it reads (PyTorch's default).
///   num_workers = N   N worker threads load whole batches ahead: worker w loads batches
///                     w, w + N, w + 2N, ... and keeps up to prefetch_factor of them ready,
///                     so N * prefetch_factor batches can be in flight; next() returns them
///                     in order. PyTorch's workers are processes (Python's interpreter lock);
///                     threads do the same job in C++.
///   pin_memory        the batches are packed into page-locked host memory, from which a
///                     GPU's copy engine reads directly: the copy to a CUDA device can then be
///                     asynchronous (without it the copy goes through a staging buffer and
///                     the host waits).
/// With a CUDA `device` next() queues the copy to the GPU on the device's current stream:
/// kernels queued after it wait for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
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
  /// Worker threads loading batches ahead (PyTorch's num_workers); 0: next() loads them.
  int num_workers = 0;
  /// Batches each worker keeps loaded ahead (PyTorch's prefetch_factor: 2 when not given).
  /// Giving it with num_workers = 0 is an error, as in PyTorch: nothing loads ahead then.
  std::optional<int> prefetch_factor;
  /// Load into page-locked (pinned) host memory (PyTorch's pin_memory). Only matters for a
  /// CUDA device; without a CUDA backend the memory is ordinary.
  bool pin_memory = false;
};

/// One batch on the loader's device.
struct Batch {
  Tensor inputs;  ///< f32 [B, sample_shape...]
  Tensor labels;  ///< i64 [B]
  std::int64_t index = 0;  ///< position of the batch in its epoch
};

/// Batches of a dataset, loaded by worker threads (see the file comment).
class DataLoader {
 public:
  /// Visits `dataset` in the order of `sampler`, or of RandomSampler(size, shuffle, seed)
  /// when none is given. Throws for a batch size < 1, num_workers < 0, or a prefetch_factor
  /// that is < 1 or given without workers.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
             std::shared_ptr<const Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Begins epoch `epoch` (its order: sampler->indices(epoch)); stops an unfinished one.
  /// `first_batch` > 0 resumes the epoch there (a checkpoint's position): the batches
  /// before it are skipped, not read, and next() delivers batch `first_batch` first.
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);
  /// The next batch of the current epoch; false at its end. A worker's error (a sample
  /// that cannot be read) is rethrown here, when its batch is due.
  bool next(Batch& batch);

  /// Batches per epoch.
  std::int64_t num_batches() const;
  /// Samples visited per epoch (after drop_last).
  std::int64_t num_samples() const;
  /// The dataset batches are drawn from.
  const Dataset& dataset() const { return *dataset_; }
  /// The options it was built with.
  const DataLoaderOptions& options() const { return options_; }
  /// Seconds next() spent in the current epoch before its batch was in host memory: waiting
  /// for a worker, or (num_workers = 0) loading it. The "data wait" of a training step;
  /// near zero when the workers keep up with training.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Slot;
  // One worker's share: its slots (prefetch_factor of them), the free ones, and the filled
  // ones in batch order (-1: the batch failed; error_ holds why).
  struct Worker {
    std::vector<int> slots;
    std::deque<int> free, ready;
    std::thread thread;
  };
  void produce(int worker, std::int64_t first, std::int64_t batches);
  void fill(Slot& slot, std::int64_t batch);
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
  std::vector<Worker> workers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::exception_ptr error_;

  std::vector<std::int64_t> order_;  // this epoch's sample order
  std::int64_t first_batch_ = 0, next_batch_ = 0, epoch_batches_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace mgpu::data
