// DataLoader: a producer thread fills host buffers ("slots") in batch order; next() hands
// them to the consumer, copying to the device (asynchronously from pinned memory on CUDA).
#include "mgpu/data/dataloader.h"

#include <algorithm>
#include <chrono>

#include "mgpu/copy.h"

namespace mgpu::data {

/// One host buffer for a batch, reused round-robin between producer and consumer.
struct DataLoader::Slot {
  Tensor inputs;  // f32 [slot_rows_, sample_shape...], pinned when the device is CUDA
  Tensor labels;  // i64 [slot_rows_]
  std::int64_t rows = 0;
  // Set after the asynchronous copy out of this slot; the producer waits on it before
  // overwriting the slot (the GPU may still be reading it).
  std::unique_ptr<Event> copied;
  bool copy_pending = false;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<const Sampler> sampler)
    : dataset_(std::move(dataset)), options_(options), sampler_(std::move(sampler)) {
  MGPU_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  MGPU_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ",
             options_.batch_size);
  MGPU_CHECK(options_.prefetch >= 0, "DataLoader: prefetch must be >= 0, got ", options_.prefetch);
  if (!sampler_)
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.shuffle, options_.seed);
  sample_shape_ = dataset_->sample_shape();
  sample_numel_ = shape_numel(sample_shape_);
  epoch_samples_ = static_cast<std::int64_t>(sampler_->indices(0).size());

  // A batch never holds more than an epoch's samples: a --batch-size far beyond the
  // dataset costs the dataset's memory, not the batch size's.
  slot_rows_ = std::max<std::int64_t>(1, std::min(options_.batch_size, epoch_samples_));
  Shape batch_shape = sample_shape_;
  batch_shape.insert(batch_shape.begin(), slot_rows_);
  const bool cuda = options_.device.is_cuda();
  const int num_slots = options_.prefetch + 1;
  for (int i = 0; i < num_slots; ++i) {
    auto slot = std::make_unique<Slot>();
    // Pinned (page-locked) memory lets the GPU's copy engine read the batch directly,
    // so the copy can run while the host goes on; pageable memory would be staged.
    slot->inputs = cuda ? Tensor::empty_pinned(batch_shape, DType::f32)
                        : Tensor::empty(batch_shape, DType::f32);
    slot->labels = cuda ? Tensor::empty_pinned({slot_rows_}, DType::i64)
                        : Tensor::empty({slot_rows_}, DType::i64);
    if (cuda) slot->copied = std::make_unique<Event>();
    slots_.push_back(std::move(slot));
  }
}

DataLoader::~DataLoader() {
  stop();
  for (auto& s : slots_)
    if (s->copy_pending) s->copied->synchronize();  // the GPU must be done reading
}

std::int64_t DataLoader::num_samples() const {
  return options_.drop_last ? (epoch_samples_ / options_.batch_size) * options_.batch_size
                            : epoch_samples_;
}

std::int64_t DataLoader::num_batches() const {
  const std::int64_t b = options_.batch_size;
  return options_.drop_last ? epoch_samples_ / b : (epoch_samples_ + b - 1) / b;
}

void DataLoader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void DataLoader::start_epoch(std::int64_t epoch, std::int64_t first_batch) {
  stop();
  MGPU_CHECK(first_batch >= 0 && first_batch <= num_batches(), "DataLoader: cannot start epoch ",
             epoch, " at batch ", first_batch, "; it has ", num_batches(), " batches");
  std::vector<std::int64_t> order = sampler_->indices(epoch);
  MGPU_CHECK(static_cast<std::int64_t>(order.size()) == epoch_samples_, "DataLoader: the sampler "
             "gave ", order.size(), " indices for epoch ", epoch, " but ", epoch_samples_,
             " for epoch 0; a sampler must give the same number every epoch");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
    error_ = nullptr;
    ready_.clear();
    free_.clear();
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) free_.push_back(i);
  }
  next_batch_ = first_batch;
  epoch_batches_ = num_batches();
  wait_seconds_ = 0;
  if (options_.prefetch > 0) {
    worker_ = std::thread(&DataLoader::produce, this, std::move(order), first_batch, epoch_batches_);
  } else {
    order_ = std::move(order);
  }
}

void DataLoader::fill(Slot& slot, const std::vector<std::int64_t>& order, std::int64_t batch) {
  const std::int64_t begin = batch * options_.batch_size;
  const std::int64_t end =
      std::min<std::int64_t>(begin + options_.batch_size, static_cast<std::int64_t>(order.size()));
  slot.rows = end - begin;
  float* x = slot.inputs.data<float>();
  std::int64_t* y = slot.labels.data<std::int64_t>();
  for (std::int64_t r = 0; r < slot.rows; ++r)
    y[r] = dataset_->get(order[static_cast<std::size_t>(begin + r)], x + r * sample_numel_);
}

void DataLoader::produce(std::vector<std::int64_t> order, std::int64_t first, std::int64_t batches) {
  for (std::int64_t b = first; b < batches; ++b) {
    int id;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !free_.empty(); });
      if (stopping_) return;
      id = free_.front();
      free_.pop_front();
    }
    Slot& slot = *slots_[static_cast<std::size_t>(id)];
    try {
      if (slot.copy_pending) {
        slot.copied->synchronize();
        slot.copy_pending = false;
      }
      fill(slot, order, b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      ready_.push_back(-1);  // tells next() to rethrow
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(id);
    }
    changed_.notify_all();
  }
}

Batch DataLoader::deliver(Slot& slot, std::int64_t batch) {
  Shape shape = sample_shape_;
  shape.insert(shape.begin(), slot.rows);
  const Tensor host_x = slot.inputs.slice(0, slot.rows);
  const Tensor host_y = slot.labels.slice(0, slot.rows);
  Batch out;
  out.index = batch;
  out.inputs = Tensor::empty(shape, DType::f32, options_.device);
  out.labels = Tensor::empty({slot.rows}, DType::i64, options_.device);
  if (options_.device.is_cuda()) {
    // Queued on the stream the training step's kernels use, so they run after the copy.
    Stream stream = Stream::current(options_.device);
    copy_async(out.inputs, host_x, stream);
    copy_async(out.labels, host_y, stream);
    slot.copied->record(stream);
    slot.copy_pending = true;
  } else {
    copy_(out.inputs, host_x);
    copy_(out.labels, host_y);
  }
  return out;
}

bool DataLoader::next(Batch& batch) {
  if (next_batch_ >= epoch_batches_) return false;
  if (options_.prefetch == 0) {
    Slot& slot = *slots_[0];
    if (slot.copy_pending) {
      slot.copied->synchronize();
      slot.copy_pending = false;
    }
    fill(slot, order_, next_batch_);
    batch = deliver(slot, next_batch_++);
    return true;
  }
  int id;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto t0 = std::chrono::steady_clock::now();
    changed_.wait(lock, [&] { return !ready_.empty(); });
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    id = ready_.front();
    if (id < 0) std::rethrow_exception(error_);  // left queued: later calls throw it again
    ready_.pop_front();
  }
  batch = deliver(*slots_[static_cast<std::size_t>(id)], next_batch_++);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(id);
  }
  changed_.notify_all();
  return true;
}

}  // namespace mgpu::data
