// DataLoader: worker threads fill host buffers ("slots") with whole batches; next() hands
// them out in batch order, copying to the device (asynchronously from pinned memory on
// CUDA). Worker w owns prefetch_factor slots and loads batches w, w + N, w + 2N, ... in
// order (counted from the epoch's first batch), so the batch next() needs is always the
// oldest one its worker holds: it is ready
// or being loaded, never stuck behind later batches (no deadlock whatever the timing).
#include "mgpu/data/dataloader.h"

#include <algorithm>
#include <chrono>

#include "mgpu/copy.h"

namespace mgpu::data {

/// One host buffer for a batch, reused by its worker.
struct DataLoader::Slot {
  Tensor inputs;  // f32 [slot_rows_, sample_shape...], pinned with pin_memory
  Tensor labels;  // i64 [slot_rows_]
  std::int64_t rows = 0;
  // Set after the asynchronous copy out of this slot; the worker waits on it before
  // overwriting the slot (the GPU may still be reading it).
  std::unique_ptr<Event> copied;
  bool copy_pending = false;
};

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<const Sampler> sampler)
    : dataset_(std::move(dataset)), options_(options), sampler_(std::move(sampler)) {
  MGPU_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  MGPU_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ",
             options_.batch_size);
  MGPU_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ",
             options_.num_workers);
  // PyTorch's rule: prefetch_factor only means something when workers load ahead.
  MGPU_CHECK(options_.num_workers > 0 || !options_.prefetch_factor,
             "DataLoader: prefetch_factor is given but num_workers is 0; with no workers "
             "nothing loads ahead: set num_workers > 0 or leave prefetch_factor out");
  const int per_worker = options_.prefetch_factor.value_or(2);
  MGPU_CHECK(per_worker >= 1, "DataLoader: prefetch_factor must be >= 1, got ", per_worker);
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
  // Pinned (page-locked) memory lets the GPU's copy engine read the batch directly, so the
  // copy can run while the host goes on; pageable memory is staged, and the host waits.
  const bool pinned = options_.pin_memory && cuda;
  const int num_slots = options_.num_workers > 0 ? options_.num_workers * per_worker : 1;
  // Pinned memory binds to the current GPU's context: make it the loader's, or a thread
  // that has not used a GPU yet would create a context on GPU 0 for it.
  DeviceGuard guard(options_.device);
  for (int i = 0; i < num_slots; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->inputs = pinned ? Tensor::empty_pinned(batch_shape, DType::f32)
                          : Tensor::empty(batch_shape, DType::f32);
    slot->labels = pinned ? Tensor::empty_pinned({slot_rows_}, DType::i64)
                          : Tensor::empty({slot_rows_}, DType::i64);
    if (pinned) slot->copied = std::make_unique<Event>();
    slots_.push_back(std::move(slot));
  }
  workers_.resize(static_cast<std::size_t>(options_.num_workers));
  for (int w = 0; w < options_.num_workers; ++w)
    for (int k = 0; k < per_worker; ++k) workers_[w].slots.push_back(w * per_worker + k);
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
  for (Worker& w : workers_)
    if (w.thread.joinable()) w.thread.join();
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
    for (Worker& w : workers_) {
      w.ready.clear();
      w.free.assign(w.slots.begin(), w.slots.end());
    }
  }
  order_ = std::move(order);
  first_batch_ = next_batch_ = first_batch;
  epoch_batches_ = num_batches();
  wait_seconds_ = 0;
  for (int w = 0; w < static_cast<int>(workers_.size()); ++w)
    workers_[w].thread = std::thread(&DataLoader::produce, this, w, first_batch, epoch_batches_);
}

void DataLoader::fill(Slot& slot, std::int64_t batch) {
  if (slot.copy_pending) {
    slot.copied->synchronize();
    slot.copy_pending = false;
  }
  const std::int64_t begin = batch * options_.batch_size;
  const std::int64_t end =
      std::min<std::int64_t>(begin + options_.batch_size, static_cast<std::int64_t>(order_.size()));
  slot.rows = end - begin;
  float* x = slot.inputs.data<float>();
  std::int64_t* y = slot.labels.data<std::int64_t>();
  for (std::int64_t r = 0; r < slot.rows; ++r)
    y[r] = dataset_->get(order_[static_cast<std::size_t>(begin + r)], x + r * sample_numel_);
}

void DataLoader::produce(int worker, std::int64_t first, std::int64_t batches) {
  // The loader's GPU for this thread too: fill() waits on that GPU's events, and a thread
  // with no device set would create a context on GPU 0 to do it (a stray one on a node
  // whose ranks use other GPUs).
  DeviceGuard guard(options_.device);
  Worker& me = workers_[static_cast<std::size_t>(worker)];
  const std::int64_t n = static_cast<std::int64_t>(workers_.size());
  for (std::int64_t b = first + worker; b < batches; b += n) {
    int id;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !me.free.empty(); });
      if (stopping_) return;
      id = me.free.front();
      me.free.pop_front();
    }
    try {
      fill(*slots_[static_cast<std::size_t>(id)], b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      me.ready.push_back(-1);  // tells next() to rethrow when this batch is due
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      me.ready.push_back(id);
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
  if (slot.copied) {
    // Pinned and bound for a GPU: queued on the stream the training step's kernels use, so
    // they run after the copy; the worker reuses the slot once the copy is done.
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
  const auto t0 = std::chrono::steady_clock::now();
  if (workers_.empty()) {  // num_workers = 0: load it here, the step waits for every sample
    Slot& slot = *slots_[0];
    fill(slot, next_batch_);
    wait_seconds_ += seconds_since(t0);
    batch = deliver(slot, next_batch_++);
    return true;
  }
  const std::int64_t n = static_cast<std::int64_t>(workers_.size());
  Worker& w = workers_[static_cast<std::size_t>((next_batch_ - first_batch_) % n)];
  int id;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !w.ready.empty(); });
    wait_seconds_ += seconds_since(t0);
    id = w.ready.front();
    if (id < 0) std::rethrow_exception(error_);  // left queued: later calls throw it again
    w.ready.pop_front();
  }
  batch = deliver(*slots_[static_cast<std::size_t>(id)], next_batch_++);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    w.free.push_back(id);
  }
  changed_.notify_all();
  return true;
}

}  // namespace mgpu::data
