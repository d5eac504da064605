// The host block cache behind CPU tensors (see host_cache.cpp); used by allocator.cpp.
#pragma once

#include <cstddef>

namespace mgpu::detail {

/// The size of the block that holds `bytes`: whole cache lines, whole pages from 64 KiB.
/// 0 when `bytes` is beyond what any allocation could hold.
std::size_t host_block_size(std::size_t bytes);
/// A block of `size` (a host_block_size), cached or new; `fresh` says whether the system
/// was asked. Aligned to 64 bytes: a cache line, enough for any vector load. nullptr when
/// the system has no such block.
void* host_cache_take(std::size_t size, bool& fresh);
/// Returns a block from host_cache_take: kept for reuse, or freed when the cache is full.
void host_cache_give(void* block, std::size_t size);
/// Frees every cached block.
void host_cache_empty();

}  // namespace mgpu::detail
