// The CPU ops' threads: the pool (thread_pool.cpp) runs parallel_for's chunks, the matrix
// products' blocks among them; OpenBLAS runs each call on the thread that made it.
#include "mgpu/threads.h"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

#include "mgpu/error.h"
#include "parallel_for.h"
#include "thread_pool.h"

// OpenBLAS's controls, declared weak: with another BLAS they are null and only our own
// loops follow set_num_threads.
extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
char* openblas_get_config() __attribute__((weak));
char* openblas_get_corename() __attribute__((weak));
}

namespace mgpu {
namespace {

// The cores this process may run on (taskset, a container's CPU set), else the machine's.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// OMP_NUM_THREADS (its first number, as OpenMP reads "4,2"), else the usable cores. The
// variable is OpenMP's, and the pool is not; it is read because it is the one every
// launcher and script already sets, PyTorch's CPU threads included.
int default_threads() {
  const char* text = std::getenv("OMP_NUM_THREADS");
  if (text == nullptr || *text == '\0') return usable_cores();
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  MGPU_CHECK(end != text && (*end == '\0' || *end == ',') && n >= 1 && n <= 4096,
             "OMP_NUM_THREADS=", text, ": give the CPU threads as a whole number from 1 to 4096 "
             "(or unset it for one per core)");
  return static_cast<int>(n);
}

// One count for every thread that calls an op (lesson 02 runs ops from threads of its own).
std::atomic<int>& thread_count() {
  static std::atomic<int> n{default_threads()};
  return n;
}

}  // namespace

void set_num_threads(int n) {
  MGPU_CHECK(n >= 1, "set_num_threads: got ", n, "; give 1 or more threads");
  thread_count() = n;
}

int num_threads() { return thread_count(); }

std::string cpu_threading_summary() {
  std::ostringstream os;
  os << num_threads() << (num_threads() == 1 ? " thread" : " threads");
  os << " (mgpu's pool; an idle thread spins " << detail::pool_spin_us()
     << " us, then sleeps: MGPU_SPIN_US)";
  if (openblas_get_config) {
    std::string config = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
    os << "; " << config.substr(0, config.find(' ', config.find(' ') + 1));
    if (openblas_get_corename) os << ", " << openblas_get_corename() << " kernels";
    os << ", one thread per call (the products are split among ours)";
  } else {
    os << "; no OpenBLAS in this program";
  }
  return os.str();
}

void set_blas_threads(int n) {
  MGPU_CHECK(n >= 1, "set_blas_threads: need at least 1 thread, got ", n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
}

namespace detail {

void blas_single_threaded() {
  // OpenBLAS's threads would otherwise run beside ours (OPENBLAS_NUM_THREADS, else the
  // cores), and spin between products.
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
  });
}

namespace {

struct Job {
  std::int64_t begin, n;
  int chunks;
  RangeFn fn;
  void* body;
  std::exception_ptr error;
  std::once_flag first_error;
};

// Chunk c of `chunks` equal parts; an exception must not leave a worker: the first is kept
// and rethrown by the caller once every chunk has returned.
void run_chunk(void* context, int c) {
  Job& job = *static_cast<Job*>(context);
  const std::int64_t lo = job.begin + job.n * c / job.chunks;
  const std::int64_t hi = job.begin + job.n * (c + 1) / job.chunks;
  try {
    job.fn(job.body, lo, hi);
  } catch (...) {
    std::call_once(job.first_error, [&] { job.error = std::current_exception(); });
  }
}

}  // namespace

void run_parallel(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, void* body) {
  const std::int64_t n = end - begin;
  grain = std::max<std::int64_t>(grain, 1);
  // One chunk per thread, each at least `grain` long.
  const std::int64_t chunks = std::min<std::int64_t>(num_threads(), std::max<std::int64_t>(1, n / grain));
  Job job{begin, n, static_cast<int>(chunks), fn, body, nullptr, {}};
  // On one thread when there is one chunk, when the pool is busy with another thread's
  // loop, or inside a loop already.
  if (chunks <= 1 || !pool_run(job.chunks, run_chunk, &job)) {
    fn(body, begin, end);
    return;
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace detail
}  // namespace mgpu
