// Lesson 02, task 1: chunk sizes, scatter and its inverse, gather.
#include "data_parallel_test_util.h"

using namespace lesson02_test;
namespace l02 = mgpu::lesson02;
using Sizes = std::vector<std::int64_t>;

TEST_CASE("task1: chunk sizes are ceil(B/k), the last one short", "[02_data_parallel][task1][points:3]") {
  CHECK(l02::chunk_sizes(10, 4) == Sizes{3, 3, 3, 1});
  CHECK(l02::chunk_sizes(8, 2) == Sizes{4, 4});
  CHECK(l02::chunk_sizes(9, 2) == Sizes{5, 4});
  CHECK(l02::chunk_sizes(7, 1) == Sizes{7});
  CHECK(l02::chunk_sizes(256, 3) == Sizes{86, 86, 84});
}

TEST_CASE("task1: a small batch makes fewer chunks than devices", "[02_data_parallel][task1][points:3]") {
  CHECK(l02::chunk_sizes(5, 4) == Sizes{2, 2, 1});  // three replicas run, not four
  CHECK(l02::chunk_sizes(1, 4) == Sizes{1});
  CHECK(l02::chunk_sizes(3, 8) == Sizes{1, 1, 1});
  CHECK(l02::chunk_sizes(6, 4) == Sizes{2, 2, 2});
  for (std::int64_t b = 1; b <= 40; ++b) {
    for (int k = 1; k <= 6; ++k) {
      INFO("B = " << b << ", k = " << k);
      const Sizes s = l02::chunk_sizes(b, k);
      std::int64_t total = 0;
      for (auto n : s) total += n;
      CHECK(total == b);
      CHECK(static_cast<int>(s.size()) <= k);
      CHECK(s.front() == (b + k - 1) / k);
      CHECK(s.back() >= 1);
    }
  }
}

TEST_CASE("task1: chunk_sizes rejects an empty batch and zero devices", "[02_data_parallel][task1][points:1]") {
  CHECK(l02::chunk_sizes(4, 2) == Sizes{2, 2});  // and works otherwise
  CHECK(contains(error_of([] { l02::chunk_sizes(0, 2); }), "batch"));
  CHECK(contains(error_of([] { l02::chunk_sizes(4, 0); }), "device"));
}

TEST_CASE("task1: scatter sends each chunk to its device with the right rows", "[02_data_parallel][task1][points:3]") {
  const Tensor x = random_tensor({10, 2, 3}, 1, DType::f32);
  l02::Traffic traffic;
  const std::vector<Device> devices = cpus(4);
  const std::vector<Tensor> chunks = l02::scatter(x, devices, &traffic);
  REQUIRE(chunks.size() == 4);
  const std::vector<float> all = x.to_vector<float>();
  std::int64_t row = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    INFO("chunk " << i);
    CHECK(chunks[i].device() == devices[i]);
    CHECK(chunks[i].shape() == Shape{i < 3 ? 3 : 1, 2, 3});
    const std::vector<float> got = chunks[i].to_vector<float>();
    const std::vector<float> want(all.begin() + row * 6, all.begin() + (row + chunks[i].size(0)) * 6);
    CHECK(got == want);
    row += chunks[i].size(0);
  }
  // x lives on cpu:0: chunk 0 stays, chunks 1..3 (7 rows of 6 floats) are copied.
  CHECK(traffic.bytes(l02::Phase::scatter) == 7 * 6 * sizeof(float));
  CHECK(traffic.bytes_sent(Device::cpu(0)) == 7 * 6 * sizeof(float));
  CHECK(traffic.bytes_received(Device::cpu(3)) == 1 * 6 * sizeof(float));
}

TEST_CASE("task1: scatter of a small batch uses only the first devices", "[02_data_parallel][task1][points:2]") {
  const Tensor x = random_tensor({5, 4}, 2);
  const std::vector<Tensor> chunks = l02::scatter(x, cpus(4, 1));  // cpu:1..cpu:4
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[0].device() == Device::cpu(1));
  CHECK(chunks[2].device() == Device::cpu(3));
  CHECK(chunks[2].shape() == Shape{1, 4});
  // gather is scatter's inverse
  const Tensor back = l02::gather(chunks, Device::cpu(0));
  CHECK(back.to_vector<double>() == x.to_vector<double>());
}

TEST_CASE("task1: gather concatenates along dimension 0 and checks the parts", "[02_data_parallel][task1][points:2]") {
  const Tensor a = random_tensor({2, 3}, 3), b = random_tensor({1, 3}, 4, DType::f64, Device::cpu(1));
  l02::Traffic traffic;
  const Tensor g = l02::gather({a, b}, Device::cpu(0), &traffic);
  CHECK(g.shape() == Shape{3, 3});
  CHECK(traffic.bytes(l02::Phase::gather) == 3 * sizeof(double));
  const Tensor wrong = random_tensor({1, 4}, 5);
  CHECK(contains(error_of([&] { l02::gather({a, wrong}, Device::cpu(0)); }), "only dimension 0"));
}

TEST_CASE("task1: gathering 0-d parts (a scalar per replica) gives one value per replica, as "
          "PyTorch's gather does",
          "[02_data_parallel][task1][points:2]") {
  const Tensor a = Tensor::full({}, 1.5, DType::f64, Device::cpu(1));
  const Tensor b = Tensor::full({}, -2.0, DType::f64, Device::cpu(2));
  const Tensor c = Tensor::full({}, 4.0, DType::f64, Device::cpu(3));
  l02::Traffic traffic;
  const Tensor g = l02::gather({a, b, c}, Device::cpu(0), &traffic);
  CHECK(g.shape() == Shape{3});
  CHECK(g.device() == Device::cpu(0));
  CHECK(g.to_vector<double>() == std::vector<double>{1.5, -2.0, 4.0});
  CHECK(traffic.bytes(l02::Phase::gather) == 3 * sizeof(double));
  // A single replica's scalar is a vector of one value too.
  CHECK(l02::gather({a}, Device::cpu(0)).shape() == Shape{1});
  // Scalars and tensors do not mix.
  const Tensor row = random_tensor({1}, 6);
  CHECK(contains(error_of([&] { l02::gather({a, row}, Device::cpu(0)); }), "scalars"));
}
