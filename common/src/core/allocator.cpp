// Storage blocks, the CUDA caching allocator and the per-device memory counters.
#include "mgpu/allocator.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "host_cache.h"
#include "mgpu/error.h"

#ifdef MGPU_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace mgpu {
namespace {

// The counters and the GPU caches are never destroyed, like the host cache (see
// host_cache.cpp): a tensor in another file's static may be freed after this file's
// statics are gone.
struct Counters {
  std::mutex mutex;
  std::map<std::pair<int, int>, MemoryStats> by_device;  // key: (kind, index)
};
Counters& counters() {
  static Counters* const c = new Counters;
  return *c;
}

MemoryStats& stats_of(const Device& d) {  // the caller holds counters().mutex
  return counters().by_device[{static_cast<int>(d.kind), d.index}];
}

void count_alloc(const Device& d, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(counters().mutex);
  MemoryStats& s = stats_of(d);
  ++s.allocations;
  s.allocated += bytes;
  if (s.allocated > s.peak_allocated) s.peak_allocated = s.allocated;
}

void count_free(const Device& d, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(counters().mutex);
  stats_of(d).allocated -= bytes;
}

// The one message for a request the device cannot serve: how much, where, and what to do.
[[noreturn]] void fail_out_of_memory(const Device& d, const std::string& what, std::size_t bytes) {
  const std::size_t in_use = memory_stats(d).allocated;
  MGPU_FAIL("out of memory on ", d.str(), " (", what, "): asked for ", bytes, " bytes (",
            static_cast<double>(bytes) / (1u << 30), " GiB) with ", in_use,
            " bytes in use on this logical device; ask for less: a smaller --batch-size or "
            "--size (or a smaller model)");
}

void* host_alloc(const Device& d, std::size_t bytes) {
  const std::size_t size = detail::host_block_size(bytes);
  bool fresh = false;
  void* p = size ? detail::host_cache_take(size, fresh) : nullptr;
  if (!p) fail_out_of_memory(d, "host memory", bytes);
  if (fresh) {
    std::lock_guard<std::mutex> lock(counters().mutex);
    ++stats_of(d).device_mallocs;
  }
  return p;
}

#ifdef MGPU_WITH_CUDA
// A freed block waits in the cache until it is handed out again. Work still queued on the
// device's streams may use it, so the free records an event on both streams of the
// freeing logical device; the next owner's stream waits for those events (no host stall).
struct CachedBlock {
  void* ptr;
  std::size_t size;
  cudaEvent_t done_compute;
  cudaEvent_t done_comm;
};

struct GpuCache {
  std::multimap<std::size_t, CachedBlock> free_blocks;  // by size, for best fit
  std::map<void*, std::size_t> block_size;               // every live or cached block
  std::vector<cudaEvent_t> spare_events;
};

struct GpuCaches {
  std::mutex mutex;
  std::map<int, GpuCache> by_gpu;
};
GpuCaches& gpu_caches() {
  static GpuCaches* const c = new GpuCaches;
  return *c;
}

// Small requests round to 512 B, large ones to 2 MiB, so blocks are reused across the
// slightly different sizes a training loop asks for.
std::size_t round_size(std::size_t bytes) {
  const std::size_t small = 512, large = 2u << 20;
  if (bytes <= (1u << 20)) return (bytes + small - 1) / small * small;
  return (bytes + large - 1) / large * large;
}

cudaEvent_t take_event(GpuCache& c) {
  if (!c.spare_events.empty()) {
    cudaEvent_t e = c.spare_events.back();
    c.spare_events.pop_back();
    return e;
  }
  cudaEvent_t e;
  MGPU_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void release_cached(int gpu, GpuCache& c) {
  for (auto& [size, b] : c.free_blocks) {
    cudaEventSynchronize(b.done_compute);
    cudaEventSynchronize(b.done_comm);
    c.spare_events.push_back(b.done_compute);
    c.spare_events.push_back(b.done_comm);
    cudaFree(b.ptr);
    c.block_size.erase(b.ptr);
    (void)size;
  }
  c.free_blocks.clear();
  (void)gpu;
}

std::size_t reserved_bytes(const GpuCache& c) {
  std::size_t total = 0;
  for (const auto& kv : c.block_size) total += kv.second;
  return total;
}

void* cuda_alloc(const Device& d, std::size_t bytes) {
  const int gpu = physical_gpu(d);
  DeviceGuard guard(d);
  const std::size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(gpu_caches().mutex);
  GpuCache& c = gpu_caches().by_gpu[gpu];
  // Best fit: the smallest cached block that is big enough, if it does not waste too much.
  auto it = c.free_blocks.lower_bound(size);
  if (it != c.free_blocks.end() && it->first <= 2 * size) {
    CachedBlock b = it->second;
    c.free_blocks.erase(it);
    cudaStream_t s = detail::launch_stream(d);
    MGPU_CUDA_CHECK(cudaStreamWaitEvent(s, b.done_compute, 0));
    MGPU_CUDA_CHECK(cudaStreamWaitEvent(s, b.done_comm, 0));
    c.spare_events.push_back(b.done_compute);
    c.spare_events.push_back(b.done_comm);
    return b.ptr;
  }
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation) {  // give the cache back to the driver and retry once
    cudaGetLastError();
    release_cached(gpu, c);
    err = cudaMalloc(&ptr, size);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail_out_of_memory(d, detail::concat("GPU ", gpu), bytes);
  }
  c.block_size[ptr] = size;
  std::lock_guard<std::mutex> slock(counters().mutex);
  ++stats_of(d).device_mallocs;
  stats_of(d).reserved = reserved_bytes(c);
  return ptr;
}

// The events and streams of a free must belong to the block's GPU: an event created, or
// recorded, while another GPU is current fails (cudaErrorInvalidResourceHandle). A tensor
// is often freed on a thread whose current GPU is another one (the main thread, a
// communication thread), so the free makes the block's GPU current for its duration.
void cuda_free(const Device& d, void* ptr) {
  const int gpu = physical_gpu(d);
  DeviceGuard guard(d);
  std::lock_guard<std::mutex> lock(gpu_caches().mutex);
  GpuCache& c = gpu_caches().by_gpu[gpu];
  CachedBlock b{ptr, c.block_size.at(ptr), take_event(c), nullptr};
  try {
    b.done_comm = take_event(c);
    // Record on the freeing device's streams: the block is free once both reach this point.
    MGPU_CUDA_CHECK(cudaEventRecord(b.done_compute, static_cast<cudaStream_t>(Stream::compute(d).handle())));
    MGPU_CUDA_CHECK(cudaEventRecord(b.done_comm, static_cast<cudaStream_t>(Stream::comm(d).handle())));
  } catch (...) {
    // Without its events the block cannot be handed out safely: it stays out of the cache
    // (the driver frees it at exit), and the error is cleared so that it is reported here,
    // not against the next kernel launch.
    cudaGetLastError();
    c.spare_events.push_back(b.done_compute);
    if (b.done_comm) c.spare_events.push_back(b.done_comm);
    throw;
  }
  c.free_blocks.emplace(b.size, b);
}
#endif  // MGPU_WITH_CUDA

}  // namespace

Storage::Storage(Device device, std::size_t bytes, bool pinned) : device_(device), bytes_(bytes) {
  (void)pinned;  // only honoured where a GPU driver can page-lock host memory
#ifdef MGPU_WITH_CUDA
  if (device.is_cpu() && pinned && cuda_available()) {
    MGPU_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes ? bytes : 1, cudaHostAllocPortable));
    pinned_ = true;
    count_alloc(device_, bytes_);
    return;
  }
#endif
  acquire();
}

Storage::~Storage() {
#ifdef MGPU_WITH_CUDA
  if (pinned_) {
    count_free(device_, bytes_);
    cudaFreeHost(ptr_);
    return;
  }
#endif
  if (ptr_ != nullptr) give_back();
}

void Storage::acquire() {
  if (device_.is_cpu()) {
    ptr_ = host_alloc(device_, bytes_);
  } else {
#ifdef MGPU_WITH_CUDA
    ptr_ = cuda_alloc(device_, bytes_ ? bytes_ : 1);
#else
    MGPU_FAIL("cannot allocate on ", device_.str(),
              ": this build has no CUDA backend (use --device cpu)");
#endif
  }
  count_alloc(device_, bytes_);
}

void Storage::give_back() {
  count_free(device_, bytes_);
  if (device_.is_cpu()) {
    detail::host_cache_give(ptr_, detail::host_block_size(bytes_));
  } else {
#ifdef MGPU_WITH_CUDA
    try {
      cuda_free(device_, ptr_);
    } catch (...) {
      // A destructor must not throw; a failing free means the context is already gone.
    }
#endif
  }
  ptr_ = nullptr;
}

void Storage::release() {
  MGPU_CHECK(!pinned_, "Storage::release: pinned host memory cannot be released and kept");
  if (ptr_ != nullptr) give_back();
}

void Storage::reallocate() {
  if (ptr_ == nullptr) acquire();
}

MemoryStats memory_stats(const Device& d) {
  std::lock_guard<std::mutex> lock(counters().mutex);
  return stats_of(d);
}

void reset_peak_memory(const Device& d) {
  std::lock_guard<std::mutex> lock(counters().mutex);
  MemoryStats& s = stats_of(d);
  s.peak_allocated = s.allocated;
}

void empty_cache() {
  detail::host_cache_empty();
#ifdef MGPU_WITH_CUDA
  std::lock_guard<std::mutex> lock(gpu_caches().mutex);
  for (auto& [gpu, c] : gpu_caches().by_gpu) {
    DeviceGuard guard(Device::cuda(gpu));  // cuda:gpu is physical GPU gpu
    release_cached(gpu, c);
  }
#endif
}

}  // namespace mgpu
