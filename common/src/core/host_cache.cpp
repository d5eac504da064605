// The host block cache. glibc serves large blocks with mmap, so a fresh one page-faults on
// first touch, and a training step that allocated its activations anew would pay that
// every step. Small blocks are cached as well, so that a warm step asks the system for
// nothing (memory_stats().device_mallocs stays put).
#include "host_cache.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

namespace mgpu::detail {
namespace {

constexpr std::size_t kCacheMin = 64u << 10;  // from here on, sizes round to whole pages
constexpr std::size_t kPage = 4096;
// Beyond this many cached bytes a freed block goes back to the system, unless the program
// once held more at a time: a step that peaks at 1.5 GiB must find all of it again.
constexpr std::size_t kCacheMax = 1u << 30;

struct HostCache {
  std::mutex mutex;
  std::multimap<std::size_t, void*> free_blocks;  // by size
  std::size_t cached_bytes = 0;
  std::size_t in_use = 0, peak_in_use = 0;  // bytes handed out and not returned
  bool closed = false;                      // set at exit: blocks given back are freed
};

void release_at_exit();

// Never destroyed: a tensor held by a static in another file may be freed after this
// file's statics are gone (their order across files is unspecified). Instead, exit frees
// the cached blocks and closes the cache (LeakSanitizer sees nothing left), and a block
// freed after that goes straight back to the system. GPU blocks are not touched at exit:
// the CUDA runtime may already be unloading, and its context's memory goes with it.
HostCache& cache() {
  static HostCache* const c = [] {
    auto* made = new HostCache;
    std::atexit(release_at_exit);  // runs before the destructors of statics made later
    return made;
  }();
  return *c;
}

// Frees the blocks held by the cache of `c` (caller holds c.mutex).
void free_cached(HostCache& c) {
  for (auto& kv : c.free_blocks) std::free(kv.second);
  c.free_blocks.clear();
  c.cached_bytes = 0;
}

// Closes and empties the cache in one step: a block given back by another thread in
// between would otherwise be cached after the cache was emptied, and never freed.
void release_at_exit() {
  HostCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.closed = true;
  free_cached(c);
}

}  // namespace

std::size_t host_block_size(std::size_t bytes) {
  if (bytes > SIZE_MAX - kPage) return 0;
  const std::size_t rounded = (bytes + 63) / 64 * 64;  // 64 B: a cache line
  if (rounded < kCacheMin) return rounded ? rounded : 64;
  return (rounded + kPage - 1) / kPage * kPage;
}

void* host_cache_take(std::size_t size, bool& fresh) {
  HostCache& c = cache();
  fresh = false;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.cached_bytes -= size;
      c.in_use += size;
      c.peak_in_use = std::max(c.peak_in_use, c.in_use);
      return p;
    }
  }
  void* p = size ? std::aligned_alloc(64, size) : nullptr;
  if (!p) return nullptr;
  fresh = true;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.in_use += size;
  c.peak_in_use = std::max(c.peak_in_use, c.in_use);
  return p;
}

void host_cache_give(void* block, std::size_t size) {
  HostCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.in_use -= size;
    if (!c.closed && c.cached_bytes + size <= std::max(kCacheMax, c.peak_in_use)) {
      c.free_blocks.emplace(size, block);
      c.cached_bytes += size;
      return;
    }
  }
  std::free(block);
}

void host_cache_empty() {
  HostCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  free_cached(c);
}

}  // namespace mgpu::detail
