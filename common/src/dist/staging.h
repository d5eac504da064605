// Private: how the mpi backend moves CUDA tensors. MPI here reads host memory only, so a
// CUDA tensor is copied into a page-locked ("pinned") host buffer on the device's comm
// stream, communicated, and copied back. Pinned memory is what lets those copies run by
// DMA at full PCIe/NVLink-C2C speed; allocating it is slow, so buffers are reused.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "mgpu/stream.h"
#include "mgpu/tensor.h"

namespace mgpu::dist::detail {

/// Reusable pinned buffers, keyed by (dtype, numel). Used by one comm thread only.
class PinnedPool {
 public:
  Tensor acquire(DType dtype, std::int64_t numel);
  void release(const Tensor& t);

 private:
  std::map<std::pair<int, std::int64_t>, std::vector<Tensor>> free_;
  std::size_t cached_bytes_ = 0;
};

/// The host side of one tensor argument of an op. For a CPU tensor it is the tensor itself;
/// for a CUDA tensor, a pinned buffer (filled from the device when `copy_in`). Returned to
/// the pool when the Staged is destroyed.
class Staged {
 public:
  Staged(const Tensor& t, bool copy_in, PinnedPool& pool, std::shared_ptr<Event> ready);
  ~Staged();
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;

  const Tensor& host() const { return host_; }
  void* data() const { return host_.raw_data(); }
  /// Copies the host buffer back into the CUDA tensor (no-op for CPU tensors), after the
  /// caller's earlier work on it.
  void copy_out();

 private:
  Tensor tensor_, host_;
  PinnedPool* pool_ = nullptr;
  std::shared_ptr<Event> ready_;
};

/// Records, on the caller's current stream of t's device, the point after which t's
/// contents are ready (nullptr for CPU tensors, whose ops are synchronous).
std::shared_ptr<Event> ready_event(const Tensor& t);

}  // namespace mgpu::dist::detail
