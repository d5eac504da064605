// Copies between any two devices. Host<->host is memcpy; anything touching a GPU goes
// through cudaMemcpyAsync on an explicit stream (our streams do not sync with stream 0).
#include "mgpu/copy.h"

#include <cstring>

#include "mgpu/host_reads.h"

#ifdef MGPU_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace mgpu {
namespace {

void check_copy(const char* op, const Tensor& dst, const Tensor& src) {
  check_defined(op, dst, "dst");
  check_defined(op, src, "src");
  check_same_dtype(op, dst, src);
  MGPU_CHECK(dst.numel() == src.numel(), op, ": element count mismatch: ", dst.str(), " vs ",
             src.str());
}

#ifdef MGPU_WITH_CUDA
// Queues the copy on `s` (a stream of the GPU side; for GPU->GPU the destination's).
void queue_copy(Tensor& dst, const Tensor& src, cudaStream_t s) {
  const std::size_t bytes = src.nbytes();
  if (dst.device().is_cuda() && src.device().is_cuda() &&
      physical_gpu(dst.device()) != physical_gpu(src.device())) {
    MGPU_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), physical_gpu(dst.device()),
                                        src.raw_data(), physical_gpu(src.device()), bytes, s));
  } else {
    // Unified addressing: the driver knows which side each pointer lives on.
    MGPU_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyDefault, s));
  }
}
#endif

}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
  check_copy("copy_", dst, src);
  if (src.numel() == 0) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    if (dst.raw_data() != src.raw_data()) std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
#ifdef MGPU_WITH_CUDA
  // The GPU side whose pending work must finish first: the source when reading from a GPU.
  const Device gpu_side = src.device().is_cuda() ? src.device() : dst.device();
  const Stream s = Stream::current(gpu_side);
  if (dst.device().is_cuda() && src.device().is_cuda() && dst.device() != src.device()) {
    // The destination's stream may still be using dst: order it before the copy.
    Event dst_ready;
    dst_ready.record(Stream::current(dst.device()));
    dst_ready.wait(s);
  }
  DeviceGuard guard(gpu_side);
  queue_copy(dst, src, static_cast<cudaStream_t>(s.handle()));
  // Within one device the copy is ordered on the stream like a kernel: no host wait (a
  // clone in a training step would otherwise stall the host once per call). A copy that
  // touches host memory, or crosses devices, completes before copy_ returns.
  if (dst.device() == src.device()) return;
  s.synchronize();
  if (dst.device().is_cpu()) detail::note_host_read();
#else
  MGPU_FAIL("copy_: ", src.str(), " -> ", dst.str(), ": this build has no CUDA backend");
#endif
}

void copy_async(Tensor& dst, const Tensor& src, const Stream& stream) {
  check_copy("copy_async", dst, src);
  if (src.numel() == 0) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    copy_(dst, src);
    return;
  }
#ifdef MGPU_WITH_CUDA
  MGPU_CHECK(stream.handle(), "copy_async: ", src.str(), " -> ", dst.str(),
             " needs a CUDA stream, got the CPU stream");
  const Tensor& host = src.device().is_cpu() ? src : dst;
  const bool host_side = src.device().is_cpu() || dst.device().is_cpu();
  if (host_side && !host.storage()->pinned()) {
    // Pageable host memory cannot be copied asynchronously: the driver would stage it
    // anyway. Do it synchronously so the caller may reuse the buffer at once.
    StreamGuard sg(stream);
    copy_(dst, src);
    return;
  }
  DeviceGuard guard(stream.device());
  queue_copy(dst, src, static_cast<cudaStream_t>(stream.handle()));
#else
  (void)stream;
  MGPU_FAIL("copy_async: ", src.str(), " -> ", dst.str(), ": this build has no CUDA backend");
#endif
}

}  // namespace mgpu
