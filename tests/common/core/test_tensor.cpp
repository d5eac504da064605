// Devices, tensors, views, memory counters and copies between devices.
#include <catch2/catch.hpp>

#include <numeric>

#include "mgpu/copy.h"
#include "mgpu/device.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"

using namespace mgpu;

TEST_CASE("device names parse and print", "[core][device]") {
  CHECK(Device::parse("cpu") == Device::cpu(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cpu:1").str() == "cpu:1");
  auto list = parse_devices("cpu:0,cpu:1");
  REQUIRE(list.size() == 2);
  CHECK(list[1] == Device::cpu(1));
  CHECK_THROWS_WITH(Device::parse("tpu:0"), Catch::Contains("expected cpu"));
  CHECK_THROWS_WITH(Device::parse("cuda:x"), Catch::Contains("non-negative integer"));
  CHECK(describe_mapping({Device::cpu(1)}).find("cpu:1 -> host memory space 1") != std::string::npos);
}

TEST_CASE("a CUDA device without a GPU is a clear error", "[core][device]") {
  if (cuda_available()) return;  // only meaningful where there is none
  CHECK_THROWS_WITH(Tensor::empty({4}, DType::f32, Device::cuda(0)),
                    Catch::Contains("--device cpu") || Catch::Contains("no CUDA"));
}

TEST_CASE("without a GPU, the CPU devices suggested are as many as were asked for",
          "[core][device]") {
  if (cuda_available()) return;  // only meaningful where there is none
  // A program that takes one device: --device cpu, not a list it would refuse.
  CHECK_THROWS_WITH(describe_mapping({Device::cuda(0)}),
                    Catch::EndsWith("run with --device cpu"));
  CHECK_THROWS_WITH(Tensor::empty({4}, DType::f32, Device::cuda(1)),
                    Catch::Contains("--device cpu") && !Catch::Contains("cpu:0,cpu:1"));
  // A program that takes a list: one CPU device for each device asked for.
  CHECK_THROWS_WITH(describe_mapping({Device::cuda(0), Device::cuda(1), Device::cuda(2)}),
                    Catch::StartsWith("cuda:0,cuda:1,cuda:2 was asked for") &&
                        Catch::Contains("run with --device cpu:0,cpu:1,cpu:2 "));
  CHECK_THROWS_WITH(describe_mapping({Device::cpu(0), Device::cuda(1)}),
                    Catch::Contains("run with --device cpu:0,cpu:1 "));
  CHECK(describe_mapping({Device::cpu(0), Device::cpu(1)}).find("cpu:1 -> ") != std::string::npos);
}

TEST_CASE("tensor shape, views, reshape and slice share storage", "[core][tensor]") {
  std::vector<float> v(12);
  std::iota(v.begin(), v.end(), 0.0f);
  Tensor t = Tensor::from_vector(v, {3, 4});
  CHECK(t.numel() == 12);
  CHECK(t.size(-1) == 4);
  CHECK(t.str() == "f32[3, 4] on cpu:0");
  Tensor row = t.slice(1, 2);
  CHECK(row.shape() == Shape{1, 4});
  CHECK(row.data<float>()[0] == 4.0f);
  Tensor flat = t.reshape({-1});
  CHECK(flat.shape() == Shape{12});
  Tensor mid = t.view(5, {2, 2});
  mid.data<float>()[0] = 100.0f;  // writes through to t
  CHECK(t.data<float>()[5] == 100.0f);
  CHECK(mid.shares_storage(t));
  CHECK(t.clone().shares_storage(t) == false);
  CHECK_THROWS_WITH(t.view(10, {3}), Catch::Contains("fall outside"));
  CHECK_THROWS_WITH(t.reshape({5, -1}), Catch::Contains("cannot infer"));
  CHECK_THROWS_WITH(t.slice(2, 4), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(t.data<double>(), Catch::Contains("f64"));
  Tensor empty = Tensor::empty({0, 5});
  CHECK(empty.numel() == 0);
  CHECK(empty.to_vector<float>().empty());
}

TEST_CASE("to_vector and item convert dtypes", "[core][tensor]") {
  Tensor t = Tensor::from_vector(std::vector<std::int64_t>{3}, {});
  CHECK(t.item() == 3.0);
  Tensor h = Tensor::from_vector(std::vector<double>{1.5, -2.25}, {2}).to(DType::f16);
  CHECK(h.dtype() == DType::f16);
  CHECK(h.to_vector<float>() == std::vector<float>{1.5f, -2.25f});
}

TEST_CASE("memory counters track each logical CPU device", "[core][memory]") {
  const Device d = Device::cpu(7);
  const std::size_t before = memory_stats(d).allocated;
  reset_peak_memory(d);
  {
    Tensor a = Tensor::empty({1000}, DType::f32, d);
    Tensor b = Tensor::empty({500}, DType::f64, d);
    CHECK(memory_stats(d).allocated == before + 8000);
  }
  CHECK(memory_stats(d).allocated == before);
  CHECK(memory_stats(d).peak_allocated == before + 8000);
  CHECK(memory_stats(Device::cpu(6)).allocated == 0);
}

TEST_CASE("copies between CPU memory spaces", "[core][copy]") {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, Device::cpu(0));
  Tensor b = a.to(Device::cpu(1));
  CHECK(b.device() == Device::cpu(1));
  CHECK(b.to_vector<float>() == std::vector<float>{1, 2, 3});
  Tensor c = Tensor::empty({3}, DType::f64);
  CHECK_THROWS_WITH(copy_(c, a), Catch::Contains("dtype mismatch"));
  Tensor d = Tensor::empty({4});
  CHECK_THROWS_WITH(copy_(d, a), Catch::Contains("element count mismatch"));
}

TEST_CASE("copies between host and logical GPUs, sync and async", "[core][copy][gpu]") {
  std::vector<float> v(1 << 20);
  std::iota(v.begin(), v.end(), 0.0f);
  Tensor host = Tensor::from_vector(v, {1 << 20});
  Tensor g0 = host.to(Device::cuda(0));
  Tensor g1 = g0.to(Device::cuda(1));  // the same GPU when only one exists: still a copy
  CHECK_FALSE(g1.shares_storage(g0));
  CHECK(g1.to_vector<float>() == v);

  Tensor pinned = Tensor::empty_pinned({1 << 20});
  CHECK(pinned.storage()->pinned());
  Stream s = Stream::comm(Device::cuda(0));
  copy_async(pinned, g0, s);
  s.synchronize();
  CHECK(pinned.to_vector<float>() == v);
}

TEST_CASE("the caching allocator reuses freed GPU blocks", "[core][memory][gpu]") {
  const Device d = Device::cuda(0);
  { Tensor warm = Tensor::empty({1 << 18}, DType::f32, d); }
  const std::size_t mallocs = memory_stats(d).device_mallocs;
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty({1 << 18}, DType::f32, d);
  }
  CHECK(memory_stats(d).device_mallocs == mallocs);
}

TEST_CASE("events order a stream after another and time GPU work", "[core][stream][gpu]") {
  const Device d = Device::cuda(0);
  Tensor a = Tensor::zeros({1 << 22}, DType::f32, d);
  Event start(true), stop(true);
  start.record(Stream::compute(d));
  Tensor b = a.clone();
  stop.record(Stream::compute(d));
  stop.wait(Stream::comm(d));
  stop.synchronize();
  CHECK(stop.query());
  CHECK(stop.elapsed_ms(start) >= 0.0f);
}
