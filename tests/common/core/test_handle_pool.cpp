// The pool of per-device handles (cuBLAS) that threads borrow while they live: its logic on
// the CPU with stand-in handles, and ([gpu]) the real cuBLAS handles created while threads
// come and go every step, as lesson 02's parallel_apply and lesson 03's pipeline start them.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/handle_pool.h"
#include "mgpu/ops.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"

using mgpu::detail::BorrowedHandles;
using mgpu::detail::HandlePool;

namespace {

// Stand-in handles: make() hands out 1, 2, 3, ... and counts.
struct Maker {
  std::atomic<int> next{0};
  int operator()() { return ++next; }
};

// Runs `threads` threads at once; each borrows a handle of device (thread % devices), and
// none ends before all have borrowed theirs. Returns the handles they held.
std::vector<int> one_step(HandlePool<int>& pool, Maker& maker, int threads, int devices) {
  std::vector<int> held(static_cast<std::size_t>(threads));
  std::mutex m;
  std::condition_variable cv;
  int borrowed = 0;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      thread_local BorrowedHandles<int> mine(pool);
      held[t] = mine.get(t % devices, [&] { return maker(); });
      std::unique_lock<std::mutex> lock(m);
      ++borrowed;
      cv.notify_all();
      cv.wait(lock, [&] { return borrowed == threads; });
    });
  }
  for (std::thread& w : workers) w.join();
  return held;
}

}  // namespace

TEST_CASE("handle pool: threads that come and go reuse the handles of those that ended",
          "[core][handles]") {
  HandlePool<int> pool;
  Maker maker;
  // 50 steps of 2 devices x 2 threads each, all four alive at once: 4 handles, not 200.
  for (int step = 0; step < 50; ++step) {
    const std::vector<int> held = one_step(pool, maker, 4, 2);
    // Threads alive at the same time never share a handle.
    CHECK(std::set<int>(held.begin(), held.end()).size() == held.size());
  }
  CHECK(pool.created() == 4);
  CHECK(maker.next == 4);
}

TEST_CASE("handle pool: a handle goes back to its own device only", "[core][handles]") {
  HandlePool<int> pool;
  Maker maker;
  // Each thread's handles, in the order it asked: (device 0, device 0, device 1), then
  // (device 1, device 0), then (device 2).
  std::vector<int> first, second, third;
  auto make = [&] { return maker(); };
  std::thread([&] {
    BorrowedHandles<int> mine(pool);
    first = {mine.get(0, make), mine.get(0, make), mine.get(1, make)};
  }).join();
  std::thread([&] {
    BorrowedHandles<int> mine(pool);
    second = {mine.get(1, make), mine.get(0, make)};
  }).join();
  std::thread([&] {
    BorrowedHandles<int> mine(pool);
    third = {mine.get(2, make)};
  }).join();
  CHECK(first == std::vector<int>{1, 1, 2});  // the same thread keeps its handle
  CHECK(second == std::vector<int>{2, 1});    // each came back to its own device
  CHECK(third == std::vector<int>{3});        // device 2 has none to reuse
  CHECK(pool.created() == 3);
}

TEST_CASE("handle pool: a failing make() creates nothing and leaves the pool usable",
          "[core][handles]") {
  HandlePool<int> pool;
  CHECK_THROWS(pool.acquire(0, []() -> int { throw std::runtime_error("no handle"); }));
  CHECK(pool.created() == 0);
  CHECK(pool.acquire(0, [] { return 7; }) == 7);
  CHECK(pool.created() == 1);
}

TEST_CASE("cuBLAS handles are bounded by the threads alive at once, not by the steps",
          "[core][handles][gpu]") {
  // Lessons 02 and 03 start fresh threads every step: two per replica (parallel_apply's
  // forward and backward), one per pipeline stage. Each does a matrix product on its device.
  const std::vector<mgpu::Device> devices = {mgpu::Device::cuda(0), mgpu::Device::cuda(1)};
  std::atomic<int> wrong{0};  // results checked on the main thread (Catch2 asserts there only)
  auto matmul_on = [&wrong](const mgpu::Device& d) {
    mgpu::Tensor a = mgpu::Tensor::full({64, 32}, 1.0, mgpu::DType::f32, d);
    mgpu::Tensor b = mgpu::Tensor::full({32, 16}, 1.0, mgpu::DType::f32, d);
    mgpu::Tensor c = mgpu::matmul(a, b);
    if (c.to(mgpu::Device::cpu()).to_vector<float>().front() != 32.0f) ++wrong;
  };
  matmul_on(devices[0]);  // the main thread's own handle
  const std::size_t before = mgpu::cublas_handles_created();
  for (int step = 0; step < 50; ++step) {
    for (int pass = 0; pass < 2; ++pass) {  // forward, backward: fresh threads each time
      std::vector<std::thread> threads;
      for (const mgpu::Device& d : devices) threads.emplace_back(matmul_on, d);
      for (std::thread& t : threads) t.join();
    }
  }
  CHECK(wrong == 0);
  const std::size_t created = mgpu::cublas_handles_created() - before;
  INFO("cuBLAS handles created by 200 short-lived threads: " << created);
  // At most one per thread alive at once (two); one handle per thread ever would be 200.
  CHECK(created <= devices.size());
}
