// The process's count of host reads of tensor data (see host_reads.h).
#include "mgpu/host_reads.h"

#include <atomic>

namespace mgpu {
namespace {
std::atomic<std::int64_t> reads{0};
}  // namespace

std::int64_t host_reads() { return reads.load(std::memory_order_relaxed); }

namespace detail {
void note_host_read() { reads.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

}  // namespace mgpu
