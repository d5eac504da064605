/// @file allocator.h
/// @brief Device memory: storage blocks, the CUDA caching allocator, per-device counters.
///
/// cudaMalloc and cudaFree synchronize the device and take tens of microseconds, so a
/// training step must not call them. Freed CUDA blocks go back to a cache keyed by size
/// and are handed out again; only a miss calls cudaMalloc. Host memory comes from the
/// system allocator, aligned to 64 bytes, through a cache of its own (a fresh large block
/// page-faults on first touch) that is emptied at exit, and may be page-locked ("pinned")
/// for async copies. A request the device cannot serve throws mgpu::Error saying how many
/// bytes were asked for, where, and what to make smaller.
#pragma once

#include <cstddef>
#include <memory>

#include "mgpu/device.h"

namespace mgpu {

/// A block of memory on one device. Tensors share it through std::shared_ptr; the block
/// returns to its allocator when the last tensor lets go.
class Storage {
 public:
  /// Allocates `bytes` on `device` (from the cache on GPUs). `pinned` asks for page-locked
  /// host memory; it is honoured only in a CUDA build with a GPU (see pinned()).
  /// Throws mgpu::Error for a CUDA device in a build without CUDA.
  Storage(Device device, std::size_t bytes, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }                ///< start of the block (device memory on GPUs)
  std::size_t bytes() const { return bytes_; }       ///< size requested at construction
  const Device& device() const { return device_; }   ///< device the block lives on
  bool pinned() const { return pinned_; }            ///< true only if page-locking succeeded

  /// Gives the block's memory back to its allocator while this Storage, and every tensor
  /// viewing it, stays: a fully sharded unit frees its gathered parameters between forward
  /// and backward although the layers' saved contexts still hold views of them (PyTorch's
  /// storage resize to 0). The counters drop by bytes(); reading such a tensor throws until
  /// reallocate(). Throws for pinned host memory.
  void release();
  /// Gives a released block memory of bytes() again (contents undefined). Does nothing when
  /// it holds memory.
  void reallocate();
  /// False between release() and reallocate().
  bool holds_memory() const { return ptr_ != nullptr; }

 private:
  void acquire();
  void give_back();

  Device device_;
  std::size_t bytes_ = 0;
  void* ptr_ = nullptr;
  bool pinned_ = false;
};

/// Counters of one logical device, in bytes.
struct MemoryStats {
  std::size_t allocated = 0;       ///< bytes held by live tensors now
  std::size_t peak_allocated = 0;  ///< highest `allocated` since the last reset
  std::size_t reserved = 0;        ///< bytes obtained from the driver (live + cached), CUDA only
  /// Blocks obtained from the system so far, the caches' misses: cudaMalloc on GPUs,
  /// aligned_alloc on the host. A warm training step adds none.
  std::size_t device_mallocs = 0;
  std::size_t allocations = 0;  ///< blocks handed to tensors so far, from the cache or not
};

/// A snapshot of `d`'s memory counters (each logical device counts separately).
MemoryStats memory_stats(const Device& d);
/// Sets peak_allocated to the current allocated value.
void reset_peak_memory(const Device& d);
/// Returns every cached, unused block to the system (cudaFree on GPUs, free on the host).
/// The host's cache is also emptied at exit; cached GPU blocks go with the CUDA context.
void empty_cache();

}  // namespace mgpu
