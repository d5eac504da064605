// A rank that uses GPU 1 only must never create a context on GPU 0. On a node with one rank
// per GPU, a stray context on GPU 0 from every rank costs each hundreds of MiB there and
// serializes them on it. This program does what a rank's threads do, all on cuda:1 (the main
// thread's ops, short-lived worker threads as in lessons 02 and 03, a free on a thread whose
// GPU is another, collectives of the mpi backend staged through pinned memory and of the
// nccl backend), and after each step asks the driver whether GPU 0's context exists.
// Exit status: 0 passed, 1 a step created it (named), 77 skipped (fewer than 2 GPUs).
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/current_device.h"
#include "mgpu/allocator.h"
#include "mgpu/data/all.h"
#include "mgpu/dist/dist.h"
#include "mgpu/ops.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"

using namespace mgpu;

int main(int argc, char** argv) {
#ifndef MGPU_WITH_CUDA
  (void)argc, (void)argv;
  std::printf("SKIPPED: this build has no CUDA backend\n");
  return 77;
#else
  if (cuda_device_count() < 2) {
    std::printf("SKIPPED: needs 2 GPUs to tell GPU 0 from the rank's own; %d visible\n",
                cuda_device_count());
    return 77;
  }
  const Device dev = Device::cuda(1);
  if (detail::primary_context_active(0)) {
    std::printf("FAILED: GPU 0's context existed before the first step\n");
    return 1;
  }
  dist::Runtime runtime(&argc, &argv);
  dist::GroupOptions quiet;
  quiet.announce = false;
  auto product_on = [dev] {
    Tensor a = Tensor::full({64, 32}, 1.0, DType::f32, dev);
    Tensor c = matmul(a, Tensor::full({32, 8}, 1.0, DType::f32, dev));
    Stream::current(dev).synchronize();
  };
  const std::vector<std::pair<std::string, std::function<void()>>> steps = {
      {"start-up (MPI, the runtime)", [] {}},
      {"ops on the main thread", [&] { product_on(); }},
      {"worker threads started per step", [&] {
         for (int step = 0; step < 3; ++step) {
           std::vector<std::thread> threads;
           for (int k = 0; k < 2; ++k) threads.emplace_back(product_on);
           for (std::thread& t : threads) t.join();
         }
       }},
      {"a free on a fresh thread", [&] {
         Tensor t = Tensor::full({1000}, 1.0, DType::f32, dev);
         std::thread([&t] { t = Tensor(); }).join();
       }},
      {"pinned host memory on the main thread", [] { Tensor::empty_pinned({1000}); }},
      {"a data loader with pinned batches, made on a fresh thread", [&] {
         std::thread([dev] {
           data::DataLoaderOptions o;
           o.batch_size = 8;
           o.device = dev;
           o.pin_memory = true;
           data::DataLoader loader(std::make_shared<data::SyntheticDataset>(32), o);
         }).join();
       }},
      {"mpi backend: a CUDA tensor staged by the comm thread", [&] {
         auto pg = dist::new_group("mpi", dev, quiet);
         Tensor t = Tensor::full({1000}, 1.0, DType::f32, dev);
         pg->all_reduce(t).wait();
         pg->barrier().wait();
       }},
      {"nccl backend: collectives on the group's stream", [&] {
         if (!dist::built_with_nccl()) return;
         auto pg = dist::new_group("nccl", dev, quiet);
         Tensor t = Tensor::full({1000}, 1.0, DType::f32, dev);
         pg->all_reduce(t).wait();
         pg->barrier().wait();
       }},
      {"empty_cache", [] { empty_cache(); }},
  };
  for (const auto& [name, run] : steps) {
    run();
    if (detail::primary_context_active(0)) {
      std::printf("FAILED: a context on GPU 0 appeared in step \"%s\", though the rank uses GPU 1 only\n",
                  name.c_str());
      return 1;
    }
    std::printf("ok: %s\n", name.c_str());
  }
  std::printf("PASSED: no context on GPU 0\n");
  return 0;
#endif
}
