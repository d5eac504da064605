// Private: a process-wide pool of per-device library handles (cuBLAS) that threads borrow
// for as long as they live.
//
// Why a pool: a handle costs a cublasCreate (host and device memory, a few milliseconds) and
// may be used by one thread at a time. Keeping one per thread for ever leaks one per thread,
// and lessons 02 and 03 start fresh threads every step (parallel_apply, the pipeline's stage
// workers). With the pool a thread takes a free handle of its device, keeps it while it runs,
// and gives it back when it ends, so the handles created are bounded by how many threads use
// one device at the same time, not by how many threads ever did.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace mgpu::detail {

template <typename Handle>
class HandlePool {
 public:
  /// A free handle of `device`, or a new one from make() when every one is in use.
  Handle acquire(int device, const std::function<Handle()>& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Handle>& free = free_[device];
      if (!free.empty()) {
        Handle h = free.back();
        free.pop_back();
        return h;
      }
    }
    Handle h = make();  // outside the lock: creating a handle is slow and may throw
    std::lock_guard<std::mutex> lock(mutex_);
    ++created_;
    return h;
  }
  /// Makes `h` (a handle of `device`) free for the next thread.
  void release(int device, Handle h) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[device].push_back(h);
  }
  /// Handles make() has created so far.
  std::size_t created() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return created_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<int, std::vector<Handle>> free_;
  std::size_t created_ = 0;
};

/// The handles one thread holds, one per device, returned to the pool when the thread ends
/// (held in a thread_local, whose destructor runs at thread exit).
template <typename Handle>
class BorrowedHandles {
 public:
  explicit BorrowedHandles(HandlePool<Handle>& pool) : pool_(pool) {}
  ~BorrowedHandles() {
    for (const auto& [device, h] : held_) pool_.release(device, h);
  }
  BorrowedHandles(const BorrowedHandles&) = delete;
  BorrowedHandles& operator=(const BorrowedHandles&) = delete;

  /// This thread's handle of `device`, borrowed from the pool on first use.
  Handle get(int device, const std::function<Handle()>& make) {
    auto it = held_.find(device);
    if (it == held_.end()) it = held_.emplace(device, pool_.acquire(device, make)).first;
    return it->second;
  }

 private:
  HandlePool<Handle>& pool_;
  std::map<int, Handle> held_;
};

}  // namespace mgpu::detail
