// Per-device compute/comm streams, the thread's current stream, events, cuBLAS handles.
#include "mgpu/stream.h"

#include <chrono>
#include <map>
#include <mutex>

#include "mgpu/error.h"

#ifdef MGPU_WITH_CUDA
#include "core/handle_pool.h"
#include "core/cuda_check.h"
#endif

namespace mgpu {
namespace {

double host_now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

#ifdef MGPU_WITH_CUDA
struct DeviceStreams {
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
};

std::mutex streams_mutex;
std::map<int, DeviceStreams> streams_by_logical;  // key: logical cuda index

// Streams are created on first use and live for the whole process. They are non-blocking:
// they do not synchronize with the legacy default stream, so every copy and kernel of the
// library names its stream explicitly.
const DeviceStreams& streams_of(const Device& d) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  DeviceStreams& s = streams_by_logical[d.index];
  if (!s.compute) {
    DeviceGuard guard(d);
    MGPU_CUDA_CHECK(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
    MGPU_CUDA_CHECK(cudaStreamCreateWithFlags(&s.comm, cudaStreamNonBlocking));
  }
  return s;
}
#endif

// The stream a thread has selected per logical CUDA device (StreamGuard), if any.
thread_local std::map<int, Stream> current_by_logical;

// d's stream of the given role (the CPU's null stream on a CPU device).
Stream stream_of(const Device& d, Stream::Role role) {
  if (d.is_cpu()) return Stream(d, nullptr);
#ifdef MGPU_WITH_CUDA
  const DeviceStreams& s = streams_of(d);
  return Stream(d, role == Stream::Role::compute ? s.compute : s.comm);
#else
  (void)role;
  MGPU_FAIL("no CUDA backend in this build: ", d.str(), " has no streams");
#endif
}

}  // namespace

Stream Stream::compute(const Device& d) { return stream_of(d, Role::compute); }

Stream Stream::comm(const Device& d) { return stream_of(d, Role::comm); }

Stream Stream::current(const Device& d) {
  if (d.is_cpu()) return Stream(d, nullptr);
  auto it = current_by_logical.find(d.index);
  if (it != current_by_logical.end()) return it->second;
  return compute(d);
}

void Stream::synchronize() const {
#ifdef MGPU_WITH_CUDA
  if (handle_) {
    DeviceGuard guard(device_);
    MGPU_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
  }
#endif
}

StreamGuard::StreamGuard(const Stream& s) : previous_(Stream::current(s.device())) {
  if (s.device().is_cuda()) current_by_logical[s.device().index] = s;
}

StreamGuard::~StreamGuard() {
  if (previous_.device().is_cuda()) current_by_logical[previous_.device().index] = previous_;
}

Event::Event(bool timing) : timing_(timing) {}

Event::~Event() {
#ifdef MGPU_WITH_CUDA
  if (handle_) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
#endif
}

void Event::record(const Stream& s) {
  host_time_ms_ = host_now_ms();
  if (!s.handle()) return;  // CPU: work is synchronous, the host time is the event time
#ifdef MGPU_WITH_CUDA
  DeviceGuard guard(s.device());
  if (!handle_) {
    cudaEvent_t e;
    MGPU_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    handle_ = e;
    gpu_ = physical_gpu(s.device());
  }
  MGPU_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(s.handle())));
#endif
}

void Event::wait(const Stream& s) const {
#ifdef MGPU_WITH_CUDA
  if (handle_ && s.handle()) {
    DeviceGuard guard(s.device());
    MGPU_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle()),
                                        static_cast<cudaEvent_t>(handle_), 0));
  }
#else
  (void)s;
#endif
}

void Event::synchronize() const {
#ifdef MGPU_WITH_CUDA
  if (handle_) MGPU_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
#endif
}

bool Event::query() const {
#ifdef MGPU_WITH_CUDA
  if (handle_) {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    MGPU_CUDA_CHECK(err);
  }
#endif
  return true;
}

float Event::elapsed_ms(const Event& start) const {
#ifdef MGPU_WITH_CUDA
  if (handle_ && start.handle_) {
    MGPU_CHECK(timing_ && start.timing_, "Event::elapsed_ms: both events need timing = true");
    float ms = 0;
    MGPU_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_),
                                         static_cast<cudaEvent_t>(handle_)));
    return ms;
  }
#endif
  return static_cast<float>(host_time_ms_ - start.host_time_ms_);
}

void synchronize(const Device& d) {
#ifdef MGPU_WITH_CUDA
  if (d.is_cuda()) {
    DeviceGuard guard(d);
    MGPU_CUDA_CHECK(cudaDeviceSynchronize());
  }
#else
  (void)d;
#endif
}

#ifdef MGPU_WITH_CUDA
namespace detail {

cudaStream_t launch_stream(const Device& d) {
  const int gpu = physical_gpu(d);
  int cur = -1;
  MGPU_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != gpu) MGPU_CUDA_CHECK(cudaSetDevice(gpu));
  return static_cast<cudaStream_t>(Stream::current(d).handle());
}

namespace {
// Never destroyed, like the allocator's caches: a thread may end (and give its handles
// back) while the process exits.
HandlePool<cublasHandle_t>& cublas_pool() {
  static auto* const pool = new HandlePool<cublasHandle_t>;
  return *pool;
}
}  // namespace

cublasHandle_t cublas_handle(const Device& d, cudaStream_t stream) {
  // A handle is used by one thread at a time: each thread borrows one per physical GPU from
  // the process's pool and gives it back when it ends (handle_pool.h says why).
  thread_local BorrowedHandles<cublasHandle_t> mine(cublas_pool());
  const int gpu = physical_gpu(d);
  cublasHandle_t h = mine.get(gpu, [&] {
    DeviceGuard guard(d);
    cublasHandle_t created = nullptr;
    MGPU_CUBLAS_CHECK(cublasCreate(&created));
    return created;
  });
  MGPU_CUBLAS_CHECK(cublasSetStream(h, stream));
  return h;
}

}  // namespace detail
#endif

std::size_t cublas_handles_created() {
#ifdef MGPU_WITH_CUDA
  return detail::cublas_pool().created();
#else
  return 0;
#endif
}

}  // namespace mgpu
