// Lesson 02, task 4: parallel_apply runs the replicas at the same time and brings their
// errors back to the caller.
#include "data_parallel_test_util.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "mgpu/ops.h"
#include "mgpu/stream.h"

using namespace lesson02_test;
namespace l02 = mgpu::lesson02;

TEST_CASE("task4: parallel_apply returns each replica's result in order", "[02_data_parallel][task4][points:2]") {
  const std::vector<Device> devices = cpus(4);
  const std::vector<Tensor> out = l02::parallel_apply(devices, [&](std::size_t i) {
    return Tensor::full({2}, static_cast<double>(10 * i), DType::f32, devices[i]);
  });
  REQUIRE(out.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(out[i].device() == devices[i]);
    CHECK(out[i].to_vector<float>() == std::vector<float>{10.0f * i, 10.0f * i});
  }
}

TEST_CASE("task4: the replicas run at the same time, one thread each", "[02_data_parallel][task4][points:3]") {
  // Each work waits until all four have started: that succeeds only if they run at once.
  // A sequential loop would wait for the others forever; the timeout turns that into a
  // clear failure instead of a hang.
  constexpr std::size_t n = 4;
  std::mutex m;
  std::condition_variable cv;
  std::size_t started = 0;
  std::set<std::thread::id> threads;
  const std::vector<Device> devices = cpus(n);
  std::vector<Tensor> out;
  REQUIRE_NOTHROW(out = l02::parallel_apply(devices, [&](std::size_t i) {
    std::unique_lock<std::mutex> lock(m);
    ++started;
    threads.insert(std::this_thread::get_id());
    cv.notify_all();
    const bool all = cv.wait_for(lock, std::chrono::seconds(3), [&] { return started == n; });
    MGPU_CHECK(all, "replica ", i, " waited 3 s for the others to start: the replicas do not run at once");
    return Tensor::zeros({1}, DType::f32, devices[i]);
  }));
  CHECK(out.size() == n);
  CHECK(threads.size() == n);
  CHECK(threads.count(std::this_thread::get_id()) == 0);  // not on the caller's thread
}

TEST_CASE("task4: an exception in one replica reaches the caller, naming the replica",
          "[02_data_parallel][task4][points:3]") {
  const std::vector<Device> devices = cpus(3);
  std::atomic<int> finished{0};
  const std::string msg = error_of([&] {
    l02::parallel_apply(devices, [&](std::size_t i) {
      if (i == 1) MGPU_FAIL("shape mismatch inside replica one");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++finished;
      return Tensor::zeros({1}, DType::f32, devices[i]);
    });
  });
  CHECK(contains(msg, "replica 1"));
  CHECK(contains(msg, "cpu:1"));
  CHECK(contains(msg, "shape mismatch inside replica one"));
  CHECK(finished == 2);  // the others ran to the end and were joined before the throw
}

TEST_CASE("task4: a standard exception is rethrown as an mgpu::Error too", "[02_data_parallel][task4][points:1]") {
  const std::vector<Device> devices = cpus(2);
  const std::string msg = error_of([&] {
    l02::parallel_apply(devices, [&](std::size_t i) -> Tensor {
      if (i == 0) throw std::out_of_range("index 7 out of range");
      return Tensor::zeros({1}, DType::f32, devices[i]);
    });
  });
  CHECK(contains(msg, "replica 0"));
  CHECK(contains(msg, "index 7 out of range"));
}

TEST_CASE("50 steps of parallel_apply on cuda:0,cuda:1 create cuBLAS handles per device, not per step",
          "[02_data_parallel][gpu]") {
  // parallel_apply starts one thread per replica every call, twice a step (forward and
  // backward); each borrows a cuBLAS handle from the library's pool and gives it back when it
  // ends (one handle per thread ever: 200 here).
  const std::vector<Device> devices = {Device::cuda(0), Device::cuda(1)};
  const std::size_t before = mgpu::cublas_handles_created();
  for (int step = 0; step < 50; ++step)
    for (int pass = 0; pass < 2; ++pass)
      l02::parallel_apply(devices, [&](std::size_t i) {
        return mgpu::matmul(Tensor::full({8, 4}, 1.0, DType::f32, devices[i]),
                            Tensor::full({4, 3}, 1.0, DType::f32, devices[i]));
      });
  const std::size_t created = mgpu::cublas_handles_created() - before;
  INFO("cuBLAS handles created over 50 steps: " << created);
  CHECK(created <= devices.size());  // at most one per replica thread alive at once
}
