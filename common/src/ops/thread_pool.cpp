// The CPU ops' worker threads (see thread_pool.h).
//
// The caller publishes a job by bumping a ticket: (job number << 16) | chunk count. Worker
// i runs chunk i of every job that has more than i chunks, then counts it off in pending_;
// the caller runs chunk 0 and waits for pending_ to reach 0. An idle worker watches the
// ticket for pool_spin_us() microseconds, then sleeps on a condition variable, and the
// caller wakes it only when some worker sleeps.
#include "thread_pool.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "mgpu/error.h"

namespace mgpu::detail {
namespace {

// Long enough to bridge the gaps between the ops of a training step (a few to a few tens
// of microseconds), short enough that an idle program leaves its cores within a blink.
constexpr int kDefaultSpinUs = 100;
constexpr std::uint64_t kChunkBits = 16;
constexpr std::uint64_t kChunkMask = (std::uint64_t{1} << kChunkBits) - 1;

int read_spin_us() {
  const char* text = std::getenv("MGPU_SPIN_US");
  if (text == nullptr || *text == '\0') return kDefaultSpinUs;
  char* end = nullptr;
  const long us = std::strtol(text, &end, 10);
  MGPU_CHECK(*end == '\0' && us >= 0 && us <= 1000000, "MGPU_SPIN_US=", text,
             ": give the microseconds an idle CPU thread waits for work before it sleeps, a whole "
             "number from 0 (sleep at once) to 1000000");
  return static_cast<int>(us);
}

// True on the workers, and on a caller while its job runs: a loop inside a loop runs on
// the thread that meets it.
thread_local bool t_inside_job = false;

class Pool {
 public:
  bool run(int chunks, ChunkFn fn, void* body) {
    if (t_inside_job) return false;
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;  // another thread's loop has the workers
    grow(chunks - 1);
    fn_ = fn;
    body_ = body;
    pending_.store(chunks - 1, std::memory_order_relaxed);
    const std::uint64_t job = (ticket_.load(std::memory_order_relaxed) >> kChunkBits) + 1;
    publish((job << kChunkBits) | static_cast<std::uint64_t>(chunks));
    t_inside_job = true;
    fn(body, 0);
    t_inside_job = false;
    while (pending_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
    return true;
  }

 private:
  // Starts workers up to `count`; each starts from the ticket of now, so it runs the job
  // its caller is about to publish.
  void grow(int count) {
    const std::uint64_t now = ticket_.load(std::memory_order_relaxed);
    while (static_cast<int>(workers_.size()) < count) {
      const int index = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, index, now] { work(index, now); });
      workers_.back().detach();  // the pool lives as long as the process
    }
  }

  // The store and the load of sleepers_ are sequentially consistent, as are a sleeper's
  // increment and its look at the ticket: one of the two threads sees the other's write,
  // so no worker sleeps through a job.
  void publish(std::uint64_t ticket) {
    ticket_.store(ticket);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
  }

  void work(int index, std::uint64_t seen) {
    t_inside_job = true;
    for (;;) {
      seen = next_ticket(seen);
      if (index < static_cast<int>(seen & kChunkMask)) {
        fn_(body_, index);
        pending_.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  std::uint64_t next_ticket(std::uint64_t seen) {
    const auto start = std::chrono::steady_clock::now();
    const auto spin = std::chrono::microseconds(spin_us_);
    do {
      const std::uint64_t ticket = ticket_.load(std::memory_order_acquire);
      if (ticket != seen) return ticket;
      std::this_thread::yield();  // a core another thread is waiting for goes to it
    } while (std::chrono::steady_clock::now() - start < spin);
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    sleepers_.fetch_add(1);
    std::uint64_t ticket = seen;
    wake_.wait(lock, [&] { return (ticket = ticket_.load()) != seen; });
    sleepers_.fetch_sub(1);
    return ticket;
  }

  std::mutex busy_;  // held by the thread whose job runs
  std::vector<std::thread> workers_;
  ChunkFn fn_ = nullptr;  // the job: written before its ticket is published
  void* body_ = nullptr;
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<int> pending_{0};  // chunks 1.. not finished yet
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  const int spin_us_ = pool_spin_us();
};

Pool*& the_pool() {
  static Pool* pool = [] {
    // A child of fork() has none of the parent's threads: it starts a pool of its own.
    pthread_atfork(nullptr, nullptr, [] { the_pool() = new Pool; });
    return new Pool;  // never destroyed: workers may still be asleep in it at exit
  }();
  return pool;
}

}  // namespace

bool pool_run(int chunks, ChunkFn fn, void* body) {
  MGPU_CHECK(chunks >= 1 && static_cast<std::uint64_t>(chunks) <= kChunkMask,
             "pool_run: ", chunks, " chunks; give 1 to ", kChunkMask);
  if (chunks == 1) {
    fn(body, 0);
    return true;
  }
  return the_pool()->run(chunks, fn, body);
}

int pool_spin_us() {
  static const int us = read_spin_us();
  return us;
}

}  // namespace mgpu::detail
