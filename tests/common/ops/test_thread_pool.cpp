// The pool of threads behind parallel_for (common/src/ops/thread_pool.cpp): every index
// once, job after job, whether the workers spin or sleep between jobs; exceptions, loops
// inside loops, two calling threads at once, and a child of fork().
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mgpu/threads.h"
#include "parallel_for.h"
#include "ops/thread_pool.h"

using mgpu::detail::parallel_for;

namespace {

struct ThreadsGuard {
  int saved = mgpu::num_threads();
  explicit ThreadsGuard(int n) { mgpu::set_num_threads(n); }
  ~ThreadsGuard() { mgpu::set_num_threads(saved); }
};

// Adds 1 to every element with a parallel_for of grain 1; true when each got exactly 1.
bool each_once(std::vector<std::atomic<int>>& hits) {
  for (auto& h : hits) h = 0;
  parallel_for(0, static_cast<std::int64_t>(hits.size()), 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits)
    if (h != 1) return false;
  return true;
}

}  // namespace

TEST_CASE("parallel_for covers every index once, job after job", "[threads][pool]") {
  ThreadsGuard threads(4);
  std::vector<std::atomic<int>> hits(1000);
  int bad = 0;
  for (int job = 0; job < 3000; ++job) {
    if (!each_once(hits)) ++bad;
    // Now and then a pause longer than the spin, so the workers go to sleep and are woken.
    if (job % 300 == 299)
      std::this_thread::sleep_for(std::chrono::microseconds(mgpu::detail::pool_spin_us() + 2000));
  }
  CHECK(bad == 0);
}

TEST_CASE("A chunk's exception reaches the caller after every chunk has run", "[threads][pool]") {
  ThreadsGuard threads(3);
  std::atomic<int> done{0};
  auto throw_in_last = [&](std::int64_t lo, std::int64_t hi) {
    done.fetch_add(1);
    if (hi == 300) throw std::runtime_error("chunk [" + std::to_string(lo) + ", 300) failed");
  };
  CHECK_THROWS_WITH(parallel_for(0, 300, 1, throw_in_last), "chunk [200, 300) failed");
  CHECK(done == 3);
  std::vector<std::atomic<int>> hits(90);
  CHECK(each_once(hits));  // the pool still works
}

TEST_CASE("A loop inside a loop runs on the thread that meets it", "[threads][pool]") {
  ThreadsGuard threads(2);
  std::vector<std::atomic<int>> hits(64 * 64);
  parallel_for(0, 64, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t row = lo; row < hi; ++row)
      parallel_for(0, 64, 1, [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c) hits[row * 64 + c].fetch_add(1);
      });
  });
  int wrong = 0;
  for (auto& h : hits) wrong += h != 1;
  CHECK(wrong == 0);
}

TEST_CASE("Two threads calling parallel_for at once both get every index once", "[threads][pool]") {
  ThreadsGuard threads(2);
  std::vector<std::atomic<int>> a(500), b(500);
  std::atomic<int> bad{0};
  auto loop = [&bad](std::vector<std::atomic<int>>& hits) {
    for (int job = 0; job < 500; ++job)
      if (!each_once(hits)) bad.fetch_add(1);
  };
  std::thread other(loop, std::ref(b));
  loop(a);
  other.join();
  CHECK(bad == 0);
}

TEST_CASE("A child of fork() gets a pool of its own", "[threads][pool]") {
  ThreadsGuard threads(2);
  std::vector<std::atomic<int>> hits(100);
  REQUIRE(each_once(hits));  // the parent's workers exist now; the child has none of them
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(20);  // a child that hangs dies of SIGALRM, and the checks below fail
    const bool ok = each_once(hits) && each_once(hits);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("the child's wait status: " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
