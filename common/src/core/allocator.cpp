// Storage blocks, the CUDA caching allocator and the per-device memory counters.
#include "mgpu/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "mgpu/error.h"

#ifdef MGPU_WITH_CUDA
#include "cuda_check.h"
#endif

namespace mgpu {
namespace {

std::mutex stats_mutex;
std::map<std::pair<int, int>, MemoryStats> stats_by_device;  // key: (kind, index)

MemoryStats& stats_of(const Device& d) {
  return stats_by_device[{static_cast<int>(d.kind), d.index}];
}

void count_alloc(const Device& d, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  MemoryStats& s = stats_of(d);
  ++s.allocations;
  s.allocated += bytes;
  if (s.allocated > s.peak_allocated) s.peak_allocated = s.allocated;
}

void count_free(const Device& d, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats_of(d).allocated -= bytes;
}

// Host blocks are cached too: glibc serves large ones with mmap, so a fresh one page-faults
// on first touch, and a training step that allocated its activations anew would pay that
// every step. Small blocks are cached as well, so that a warm step asks the system for
// nothing (memory_stats().device_mallocs stays put) and the counters say so.
constexpr std::size_t kHostCacheMin = 64u << 10;  // from here on, sizes round to whole pages
// Beyond this many cached bytes a freed block goes back to the system, unless the program
// once held more at a time: a step that peaks at 1.5 GiB must find all of it again.
constexpr std::size_t kHostCacheMax = 1u << 30;
std::mutex host_cache_mutex;
std::multimap<std::size_t, void*> host_free_blocks;
std::size_t host_cached_bytes = 0;
std::size_t host_in_use = 0, host_peak_in_use = 0;  // bytes handed out and not returned

std::size_t host_block_size(std::size_t bytes) {
  const std::size_t rounded = (bytes + 63) / 64 * 64;  // 64 B: a cache line
  if (rounded < kHostCacheMin) return rounded ? rounded : 64;
  const std::size_t page = 4096;
  return (rounded + page - 1) / page * page;
}

void* host_alloc(const Device& d, std::size_t size) {
  {
    std::lock_guard<std::mutex> lock(host_cache_mutex);
    host_in_use += size;
    host_peak_in_use = std::max(host_peak_in_use, host_in_use);
    auto it = host_free_blocks.find(size);
    if (it != host_free_blocks.end()) {
      void* p = it->second;
      host_free_blocks.erase(it);
      host_cached_bytes -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, size);
  if (!p) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(stats_mutex);
  ++stats_of(d).device_mallocs;
  return p;
}

void host_free(void* p, std::size_t size) {
  {
    std::lock_guard<std::mutex> lock(host_cache_mutex);
    host_in_use -= size;
    if (host_cached_bytes + size <= std::max(kHostCacheMax, host_peak_in_use)) {
      host_free_blocks.emplace(size, p);
      host_cached_bytes += size;
      return;
    }
  }
  std::free(p);
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

std::mutex cache_mutex;
std::map<int, GpuCache> caches;  // by physical GPU

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
  std::lock_guard<std::mutex> lock(cache_mutex);
  GpuCache& c = caches[gpu];
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
    MGPU_FAIL("out of memory on ", d.str(), " (GPU ", gpu, "): asked for ", bytes, " bytes with ",
              memory_stats(d).allocated, " bytes in use on this logical device; use a smaller "
              "--batch-size or model");
  }
  c.block_size[ptr] = size;
  std::lock_guard<std::mutex> slock(stats_mutex);
  ++stats_of(d).device_mallocs;
  stats_of(d).reserved = reserved_bytes(c);
  return ptr;
}

void cuda_free(const Device& d, void* ptr) {
  const int gpu = physical_gpu(d);
  std::lock_guard<std::mutex> lock(cache_mutex);
  GpuCache& c = caches[gpu];
  CachedBlock b{ptr, c.block_size.at(ptr), take_event(c), take_event(c)};
  // Record on the freeing device's streams: the block is free once both reach this point.
  cudaEventRecord(b.done_compute, static_cast<cudaStream_t>(Stream::compute(d).handle()));
  cudaEventRecord(b.done_comm, static_cast<cudaStream_t>(Stream::comm(d).handle()));
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
    // 64-byte alignment: a cache line, and enough for any vector load.
    ptr_ = host_alloc(device_, host_block_size(bytes_));
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
    host_free(ptr_, host_block_size(bytes_));
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
  std::lock_guard<std::mutex> lock(stats_mutex);
  return stats_of(d);
}

void reset_peak_memory(const Device& d) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  MemoryStats& s = stats_of(d);
  s.peak_allocated = s.allocated;
}

void empty_cache() {
  {
    std::lock_guard<std::mutex> lock(host_cache_mutex);
    for (auto& kv : host_free_blocks) std::free(kv.second);
    host_free_blocks.clear();
    host_cached_bytes = 0;
  }
#ifdef MGPU_WITH_CUDA
  std::lock_guard<std::mutex> lock(cache_mutex);
  for (auto& [gpu, c] : caches) {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(gpu);
    release_cached(gpu, c);
    cudaSetDevice(prev);
  }
#endif
}

}  // namespace mgpu
