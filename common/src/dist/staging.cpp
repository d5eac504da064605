// Pinned staging buffers for CUDA tensors on the mpi backend.
#include "staging.h"

#include "mgpu/copy.h"

namespace mgpu::dist::detail {

namespace {
constexpr std::size_t kMaxCachedBytes = std::size_t(2) << 30;  // keep at most 2 GiB pinned
}

Tensor PinnedPool::acquire(DType dtype, std::int64_t numel) {
  auto it = free_.find({static_cast<int>(dtype), numel});
  if (it != free_.end() && !it->second.empty()) {
    Tensor t = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= t.nbytes();
    return t;
  }
  return Tensor::empty_pinned({numel}, dtype);
}

void PinnedPool::release(const Tensor& t) {
  if (cached_bytes_ + t.nbytes() > kMaxCachedBytes) return;  // let it go back to the driver
  free_[{static_cast<int>(t.dtype()), t.numel()}].push_back(t);
  cached_bytes_ += t.nbytes();
}

Staged::Staged(const Tensor& t, bool copy_in, PinnedPool& pool, std::shared_ptr<Event> ready)
    : tensor_(t), ready_(std::move(ready)) {
  if (!t.device().is_cuda()) {
    host_ = t;
    return;
  }
  pool_ = &pool;
  // The tensor's GPU, so that a pinned buffer allocated here binds to it (a thread with no
  // GPU current would create a context on GPU 0 for it).
  DeviceGuard guard(t.device());
  host_ = pool.acquire(t.dtype(), t.numel());
  if (copy_in) {
    // The comm stream waits for the work that produced t on the caller's stream.
    Stream comm = Stream::comm(t.device());
    if (ready_) ready_->wait(comm);
    copy_async(host_, t, comm);
    comm.synchronize();
  }
}

Staged::~Staged() {
  if (pool_) pool_->release(host_);
}

void Staged::copy_out() {
  if (!pool_) return;
  Stream comm = Stream::comm(tensor_.device());
  if (ready_) ready_->wait(comm);
  copy_async(tensor_, host_, comm);
  comm.synchronize();  // the result is visible to every stream once the Work completes
}

std::shared_ptr<Event> ready_event(const Tensor& t) {
  if (!t.device().is_cuda()) return nullptr;
  auto e = std::make_shared<Event>();
  e->record(Stream::current(t.device()));
  return e;
}

}  // namespace mgpu::dist::detail
