// DataLoader workers (PyTorch's num_workers, prefetch_factor, pin_memory) and slow storage.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "data_test_util.h"
#include "mgpu/data/all.h"

using namespace mgpu;
using namespace mgpu::data;

namespace {

// Labels that identify the sample (label i = i), inputs i, 2i, -i; counts reads; sample
// `fail_at` fails.
struct Numbers : datatest::NumberedDataset {
  explicit Numbers(std::int64_t n, std::int64_t fail_at = -1) : NumberedDataset(n, {1, 2, -1}, fail_at) {}
};

// Every batch of an epoch: labels, with -1 between batches; inputs checked against labels.
std::vector<std::int64_t> epoch_of(DataLoader& loader, std::int64_t epoch) {
  std::vector<std::int64_t> seen;
  loader.start_epoch(epoch);
  Batch b;
  while (loader.next(b)) {
    const auto x = b.inputs.to_vector<float>();
    const auto y = b.labels.to_vector<std::int64_t>();
    for (std::size_t r = 0; r < y.size(); ++r) {
      CHECK(x[3 * r + 1] == 2.0f * static_cast<float>(y[r]));
      seen.push_back(y[r]);
    }
    seen.push_back(-1);
  }
  return seen;
}

// Waits up to 10 s for `pred`; true if it came true.
template <class Pred>
bool eventually(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("DataLoader: any number of workers gives the batches of num_workers = 0, in order",
          "[data][loader][workers]") {
  auto ds = std::make_shared<Numbers>(23);  // 6 batches of 4, the last of 3
  DataLoaderOptions o;
  o.batch_size = 4;
  o.seed = 7;
  DataLoader main_thread(ds, o);
  for (int workers : {1, 2, 3, 4, 7}) {
    for (int factor : {1, 2, 5}) {
      CAPTURE(workers, factor);
      o.num_workers = workers;
      o.prefetch_factor = factor;
      DataLoader loader(ds, o);
      for (std::int64_t epoch : {0, 1})
        CHECK(epoch_of(loader, epoch) == epoch_of(main_thread, epoch));
      // An epoch abandoned half-way, then a new one: the workers restart cleanly.
      loader.start_epoch(2);
      Batch b;
      REQUIRE(loader.next(b));
      CHECK(epoch_of(loader, 3) == epoch_of(main_thread, 3));
    }
  }
}

TEST_CASE("DataLoader: workers load ahead, num_workers = 0 loads only when asked",
          "[data][loader][workers]") {
  DataLoaderOptions o;
  o.batch_size = 5;
  o.shuffle = false;
  auto lazy = std::make_shared<Numbers>(100);
  DataLoader in_loop(lazy, o);
  in_loop.start_epoch(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(lazy->reads() == 0);  // nothing read before next()
  Batch b;
  REQUIRE(in_loop.next(b));
  CHECK(lazy->reads() == 5);

  // 2 workers x prefetch_factor 3: six batches (30 samples) load before any next(), no more.
  auto eager = std::make_shared<Numbers>(100);
  o.num_workers = 2;
  o.prefetch_factor = 3;
  DataLoader ahead(eager, o);
  ahead.start_epoch(0);
  CHECK(eventually([&] { return eager->reads() == 30; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(eager->reads() == 30);
  REQUIRE(ahead.next(b));  // frees one slot of worker 0: it loads batch 6
  CHECK(eventually([&] { return eager->reads() == 35; }));
}

TEST_CASE("DataLoader: a worker's error arrives with its batch, the batches before it first",
          "[data][loader][workers]") {
  auto broken = std::make_shared<Numbers>(20, 13);  // in batch 3 (samples 12..15)
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  o.num_workers = 2;
  DataLoader loader(broken, o);
  loader.start_epoch(0);
  Batch b;
  for (int i = 0; i < 3; ++i) CHECK(loader.next(b));
  CHECK_THROWS_WITH(loader.next(b), Catch::Contains("sample 13 is unreadable"));
  CHECK_THROWS_WITH(loader.next(b), Catch::Contains("sample 13 is unreadable"));  // no hang
  loader.start_epoch(1);  // and the loader can be restarted
  CHECK(loader.next(b));
}

TEST_CASE("DataLoader: options checked as PyTorch checks them", "[data][loader][workers]") {
  auto ds = std::make_shared<Numbers>(10);
  DataLoaderOptions o;
  o.prefetch_factor = 2;  // given, with num_workers = 0
  CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("num_workers is 0"));
  o.num_workers = 2;
  o.prefetch_factor = 0;
  CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("prefetch_factor must be >= 1"));
  o.prefetch_factor.reset();
  o.num_workers = -1;
  CHECK_THROWS_WITH(DataLoader(ds, o), Catch::Contains("num_workers must be >= 0"));
  // pin_memory without a GPU device: ordinary memory, the same batches.
  o.num_workers = 1;
  o.pin_memory = true;
  DataLoader pinned(ds, o);
  o.pin_memory = false;
  DataLoader plain(ds, o);
  CHECK(epoch_of(pinned, 0) == epoch_of(plain, 0));
}

TEST_CASE("ThrottledDataset: the same samples, each after its wait", "[data][throttled]") {
  auto inner = std::make_shared<Numbers>(8);
  ThrottledDataset slow(inner, 0.002);
  CHECK(slow.size() == 8);
  CHECK(slow.sample_shape() == Shape{3});
  CHECK(slow.describe().find("2000 us") != std::string::npos);
  float f[3];
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(slow.get(5, f) == 5);
  CHECK(f[2] == -5.0f);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(2));  // a lower bound only
  CHECK_THROWS_AS(ThrottledDataset(inner, -1), Error);
}
