// DeviceGuard restores only what it changed, and the caching allocator frees a block on the
// block's own GPU. The rule is checked on the CPU; [multi_gpu] cases show both on a machine
// with two GPUs, where the defects they fix appear (one GPU cannot tell them apart).
#include <catch2/catch.hpp>

#include <thread>

#include "core/current_device.h"
#include "mgpu/allocator.h"
#include "mgpu/ops.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"

#ifdef MGPU_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using mgpu::detail::device_to_restore;

TEST_CASE("DeviceGuard restores only a device it changed, to a context the thread had",
          "[core][device]") {
  // Already on the wanted GPU: nothing changed, nothing to restore.
  CHECK(device_to_restore(1, 1, true) == -1);
  CHECK(device_to_restore(0, 0, false) == -1);
  // Changed from a GPU the thread was working on: back to it.
  CHECK(device_to_restore(0, 1, true) == 0);
  CHECK(device_to_restore(2, 0, true) == 2);
  // A fresh thread reports device 0 with no context: "restoring" it would create one there.
  CHECK(device_to_restore(0, 1, false) == -1);
}

#ifdef MGPU_WITH_CUDA
TEST_CASE("a fresh thread left by a DeviceGuard stays on the guard's GPU", "[core][device][gpu][multi_gpu]") {
  int after_guard = -1;
  bool had_context = false;
  std::thread([&] {
    { mgpu::DeviceGuard guard(mgpu::Device::cuda(1)); }
    cudaGetDevice(&after_guard);
    had_context = mgpu::detail::thread_has_cuda_context();
  }).join();
  CHECK(after_guard == 1);  // not 0: that would have created a context on GPU 0
  CHECK(had_context);

  // A thread that was working on GPU 0 gets GPU 0 back.
  int restored = -1;
  std::thread([&] {
    mgpu::set_thread_device(mgpu::Device::cuda(0));
    cudaFree(nullptr);  // makes sure GPU 0's context is bound
    { mgpu::DeviceGuard guard(mgpu::Device::cuda(1)); }
    cudaGetDevice(&restored);
  }).join();
  CHECK(restored == 0);
}

TEST_CASE("a tensor of GPU 1 freed while GPU 0 is current goes back to GPU 1's cache intact",
          "[core][allocator][gpu][multi_gpu]") {
  const mgpu::Device gpu1 = mgpu::Device::cuda(1);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  mgpu::Tensor t = mgpu::Tensor::full({1000}, 3.0, mgpu::DType::f32, gpu1);
  mgpu::synchronize(gpu1);
  const std::size_t mallocs = mgpu::memory_stats(gpu1).device_mallocs;
  cudaError_t after_free = cudaErrorUnknown;
  int gpu_after_free = -1;
  std::thread([&] {
    mgpu::set_thread_device(mgpu::Device::cuda(0));  // as a comm thread of another rank would be
    t = mgpu::Tensor();                             // the free records its events here
    after_free = cudaGetLastError();
    cudaGetDevice(&gpu_after_free);
  }).join();
  // The events must be GPU 1's and recorded without error; before, they were created on
  // GPU 0 and the failed records were left for a later, unrelated call to report.
  CHECK(after_free == cudaSuccess);
  CHECK(gpu_after_free == 0);  // the free's own guard gave GPU 0 back
  // The same size again comes from the cache, ordered after the free, and works.
  mgpu::Tensor again = mgpu::Tensor::full({1000}, 5.0, mgpu::DType::f32, gpu1);
  CHECK(mgpu::memory_stats(gpu1).device_mallocs == mallocs);
  CHECK(mgpu::sum(again).item() == 5000.0);
  CHECK(cudaGetLastError() == cudaSuccess);
}
#endif
