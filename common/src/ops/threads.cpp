// The CPU ops' threads: OpenMP runs parallel_for's chunks, the matrix products' blocks
// among them; OpenBLAS runs each call on the thread that made it.
#include "mgpu/threads.h"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "mgpu/error.h"
#include "parallel_for.h"

// OpenBLAS's controls, declared weak: with another BLAS they are null and only our own
// loops follow set_num_threads.
extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
char* openblas_get_config() __attribute__((weak));
char* openblas_get_corename() __attribute__((weak));
}

namespace mgpu {
namespace {

int default_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();  // OMP_NUM_THREADS, else the cores
#else
  return 1;
#endif
}

// One count for every thread that calls an op: OpenMP's own setting is per calling thread,
// and lesson 02 runs ops from threads of its own.
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
#ifdef _OPENMP
  os << " (OpenMP)";
#else
  os << " (built without OpenMP: our loops run on one)";
#endif
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  os << "; OMP_WAIT_POLICY=" << (wait ? wait : "(unset)");
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

void run_parallel(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, void* body) {
  const std::int64_t n = end - begin;
  grain = std::max<std::int64_t>(grain, 1);
  int threads = num_threads();
#ifdef _OPENMP
  if (omp_in_parallel()) threads = 1;  // already inside a parallel loop: no nested teams
#endif
  // One chunk per thread, each at least `grain` long.
  const std::int64_t chunks = std::min<std::int64_t>(threads, std::max<std::int64_t>(1, n / grain));
  if (chunks <= 1) {
    fn(body, begin, end);
    return;
  }
  std::exception_ptr error;
  std::once_flag first_error;
  // An exception must not leave an OpenMP region: keep the first and rethrow it after.
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static, 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t lo = begin + n * c / chunks, hi = begin + n * (c + 1) / chunks;
    try {
      fn(body, lo, hi);
    } catch (...) {
      std::call_once(first_error, [&] { error = std::current_exception(); });
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace detail
}  // namespace mgpu
