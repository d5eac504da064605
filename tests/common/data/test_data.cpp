// IDX reading and its errors, the datasets, shuffling, and DataLoader order determinism.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "data_test_util.h"
#include "gpu.h"
#include "mgpu/data/all.h"
#include "temp_dir.h"

using namespace mgpu;
using namespace mgpu::data;
namespace fs = std::filesystem;

using mgpu::testing::TempDir;

namespace {

std::vector<unsigned char> idx_bytes(unsigned char type, std::vector<std::uint32_t> dims,
                                     std::size_t payload) {
  std::vector<unsigned char> b = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<unsigned char>(d >> shift));
  for (std::size_t i = 0; i < payload; ++i) b.push_back(static_cast<unsigned char>(i * 7));
  return b;
}

void write_plain(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gz(const std::string& path, const std::vector<unsigned char>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}

std::vector<std::int64_t> labels_of(DataLoader& loader, std::int64_t epoch) {
  std::vector<std::int64_t> seen;
  loader.start_epoch(epoch);
  Batch b;
  while (loader.next(b)) {
    const auto v = b.labels.to_vector<std::int64_t>();
    seen.insert(seen.end(), v.begin(), v.end());
    seen.push_back(-1);  // batch boundary
  }
  return seen;
}

/// Labels that identify the sample: label i = i (a dataset of distinct labels); inputs i, -i.
struct CountingDataset : datatest::NumberedDataset {
  explicit CountingDataset(std::int64_t n, std::int64_t fail_at = -1) : NumberedDataset(n, {1, -1}, fail_at) {}
};

}  // namespace

TEST_CASE("read_idx reads plain and gzip files", "[data][idx]") {
  TempDir dir;
  const auto bytes = idx_bytes(0x08, {3, 2, 2}, 12);
  write_plain(dir.file("a.idx"), bytes);
  write_gz(dir.file("a.idx.gz"), bytes);
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    IdxArray a = read_idx(dir.file(name));
    CHECK(a.dims == std::vector<std::int64_t>{3, 2, 2});
    REQUIRE(a.values.size() == 12);
    CHECK(a.values[5] == 35);
  }
}

TEST_CASE("read_idx errors name the file and the problem", "[data][idx]") {
  TempDir dir;
  CHECK_THROWS_WITH(read_idx(dir.file("missing.idx")),
                    Catch::Contains("cannot open") && Catch::Contains("missing.idx"));
  auto bad_magic = idx_bytes(0x08, {4}, 4);
  bad_magic[0] = 0x1f;
  write_plain(dir.file("magic.idx"), bad_magic);
  CHECK_THROWS_WITH(read_idx(dir.file("magic.idx")),
                    Catch::Contains("not an IDX file") && Catch::Contains("magic.idx"));
  write_plain(dir.file("type.idx"), idx_bytes(0x0D, {4}, 16));
  CHECK_THROWS_WITH(read_idx(dir.file("type.idx")), Catch::Contains("0xd"));
  write_gz(dir.file("short.idx.gz"), idx_bytes(0x08, {10, 10}, 99));
  CHECK_THROWS_WITH(read_idx(dir.file("short.idx.gz")),
                    Catch::Contains("truncated") && Catch::Contains("short.idx.gz"));
  write_plain(dir.file("long.idx"), idx_bytes(0x08, {2, 2}, 5));
  CHECK_THROWS_WITH(read_idx(dir.file("long.idx")), Catch::Contains("past the 4 values"));
  write_plain(dir.file("header.idx"), {0, 0, 8, 3, 0, 0});
  CHECK_THROWS_WITH(read_idx(dir.file("header.idx")), Catch::Contains("ends inside its header"));
}

TEST_CASE("FashionMNIST explains how to get the data; checks the files agree", "[data][fmnist]") {
  CHECK_THROWS_WITH(FashionMNIST("/nonexistent/fashion", Split::train),
                    Catch::Contains("sudo apt-get install dataset-fashion-mnist") &&
                        Catch::Contains("--data synthetic"));
  TempDir dir;
  write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {3, 2, 2}, 12));
  write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes(0x08, {4}, 4));
  CHECK_THROWS_WITH(FashionMNIST(dir.path(), Split::test), Catch::Contains("4 labels"));
  CHECK_THROWS_WITH(FashionMNIST(dir.path(), Split::train),
                    Catch::Contains("train-images-idx3-ubyte.gz"));
  write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), {0, 0, 8, 1, 0, 0, 0, 3, 1, 9, 4});
  FashionMNIST tiny(dir.path(), Split::test);
  CHECK(tiny.size() == 3);
  CHECK(tiny.sample_shape() == Shape{1, 2, 2});
  float px[4];
  CHECK(tiny.get(1, px) == 9);
  // Pixel 4*7 = 28 of image 1, normalised.
  CHECK(px[0] == Approx((28 / 255.0 - FashionMNIST::kMean) / FashionMNIST::kStd).epsilon(1e-6));
}

TEST_CASE("FashionMNIST refuses files with no images or with 0x0 images", "[data][fmnist]") {
  TempDir dir;
  write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {0, 28, 28}, 0));
  write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {0}, 0));
  CHECK_THROWS_WITH(FashionMNIST(dir.path(), Split::test),
                    Catch::Contains("holds no images") && Catch::Contains("t10k-images-idx3-ubyte"));
  write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {2, 0, 0}, 0));
  write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {2}, 2));
  CHECK_THROWS_WITH(FashionMNIST(dir.path(), Split::test), Catch::Contains("images of 0x0"));
}

TEST_CASE("the installed Fashion-MNIST has 60000 + 10000 labelled images", "[data][fmnist]") {
  if (!fs::is_directory(FashionMNIST::kDefaultDir)) {
    WARN("Fashion-MNIST is not installed here; nothing to check");
    return;
  }
  FashionMNIST train(FashionMNIST::kDefaultDir, Split::train);
  FashionMNIST test(FashionMNIST::kDefaultDir, Split::test);
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.sample_shape() == Shape{1, 28, 28});
  std::vector<std::int64_t> per_class(10);
  std::vector<float> x(784);
  double sum = 0;
  for (std::int64_t i = 0; i < train.size(); i += 60) {
    per_class[static_cast<std::size_t>(train.get(i, x.data()))]++;
    for (float v : x) sum += v;
  }
  for (auto n : per_class) CHECK(n > 50);  // every class present
  CHECK(sum / (1000.0 * 784) == Approx(0).margin(0.05));  // normalised: mean near 0
}

TEST_CASE("synthetic data is deterministic and its splits share classes", "[data][synthetic]") {
  SyntheticDataset a(100, {3, 4}, 5, 7), b(100, {3, 4}, 5, 7), other(100, {3, 4}, 5, 8);
  SyntheticDataset test(100, {3, 4}, 5, 7, Split::test);
  std::vector<float> xa(12), xb(12), xo(12);
  std::set<std::int64_t> labels;
  for (std::int64_t i = 0; i < 100; ++i) {
    const auto la = a.get(i, xa.data());
    CHECK(la == b.get(i, xb.data()));
    CHECK(xa == xb);
    other.get(i, xo.data());
    CHECK(xa != xo);
    labels.insert(la);
  }
  CHECK(labels.size() == 5);
  CHECK_THROWS_WITH(a.get(100, xa.data()), Catch::Contains("outside [0, 100)"));
  // Train and test samples of the same class lie near the same prototype (noise 1, 12 dims).
  std::vector<float> xt(12);
  for (std::int64_t i = 0; i < 20; ++i) {
    const auto lt = test.get(i, xt.data());
    for (std::int64_t j = 0; j < 100; ++j)
      if (a.get(j, xa.data()) == lt) {
        for (int k = 0; k < 12; ++k) CHECK(std::fabs(xa[k] - xt[k]) <= 2.0f);
        break;
      }
  }
  CHECK(open_dataset("synthetic", Split::test)->size() == 10000);
}

TEST_CASE("shuffled_indices is a permutation fixed by seed and epoch", "[data][sampler]") {
  const auto p = shuffled_indices(1000, 3, 0);
  std::set<std::int64_t> all(p.begin(), p.end());
  CHECK(all.size() == 1000);
  CHECK(*all.begin() == 0);
  CHECK(*all.rbegin() == 999);
  CHECK(p == shuffled_indices(1000, 3, 0));
  CHECK(p != shuffled_indices(1000, 3, 1));
  CHECK(p != shuffled_indices(1000, 4, 0));
  CHECK(shuffled_indices(0, 1, 0).empty());
  CHECK(shuffled_indices(1, 1, 0) == std::vector<std::int64_t>{0});
}

TEST_CASE("DataLoader batches in a fixed order, with or without prefetching", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoaderOptions o;
  o.batch_size = 4;
  o.seed = 5;
  o.num_workers = 0;
  DataLoader sync(ds, o);
  o.num_workers = 1;
  o.prefetch_factor = 3;
  DataLoader async(ds, o);
  CHECK(sync.num_batches() == 3);
  for (std::int64_t epoch : {0, 1, 2}) {
    const auto s = labels_of(sync, epoch);
    CHECK(s == labels_of(async, epoch));
    // Each epoch visits the order shuffled_indices gives, in batches of 4, 4, 2.
    const auto order = shuffled_indices(10, 5, epoch);
    std::vector<std::int64_t> expect;
    for (std::size_t i = 0; i < order.size(); ++i) {
      expect.push_back(order[i]);
      if (i % 4 == 3 || i + 1 == order.size()) expect.push_back(-1);
    }
    CHECK(s == expect);
  }
  CHECK(labels_of(sync, 0) != labels_of(sync, 1));

  // Inputs travel with their labels.
  async.start_epoch(4);
  Batch b;
  REQUIRE(async.next(b));
  CHECK(b.inputs.shape() == Shape{4, 2});
  const auto x = b.inputs.to_vector<float>();
  const auto y = b.labels.to_vector<std::int64_t>();
  for (int r = 0; r < 4; ++r) CHECK(x[static_cast<std::size_t>(r * 2 + 1)] == -static_cast<float>(y[static_cast<std::size_t>(r)]));
  // Abandoning an epoch half-way and starting another is fine.
  CHECK(labels_of(async, 0) == labels_of(sync, 0));
}

TEST_CASE("DataLoader drop_last, no shuffle, and errors from the loading thread",
          "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  o.drop_last = true;
  DataLoader loader(ds, o);
  CHECK(loader.num_batches() == 2);
  CHECK(loader.num_samples() == 8);
  CHECK(labels_of(loader, 3) == std::vector<std::int64_t>{0, 1, 2, 3, -1, 4, 5, 6, 7, -1});

  auto broken = std::make_shared<CountingDataset>(10, 6);
  DataLoader bad(broken, o);
  bad.start_epoch(0);
  Batch b;
  CHECK(bad.next(b));
  CHECK_THROWS_WITH(bad.next(b), Catch::Contains("sample 6 is unreadable"));
  CHECK_THROWS_WITH(bad.next(b), Catch::Contains("sample 6 is unreadable"));  // no hang
}

TEST_CASE("DataLoader: a batch size beyond the data costs the data's memory, not the batch's",
          "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoaderOptions o;
  o.batch_size = std::int64_t{1} << 40;  // 2^40 rows of 2 floats would be 8 TiB
  o.shuffle = false;
  DataLoader loader(ds, o);
  CHECK(loader.num_batches() == 1);
  CHECK(labels_of(loader, 0) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1});
  o.drop_last = true;  // as in PyTorch: no full batch, no batch
  DataLoader dropped(ds, o);
  CHECK(dropped.num_batches() == 0);
  CHECK(labels_of(dropped, 0).empty());
}

TEST_CASE("DataLoader resumes an epoch at a batch (a checkpoint's position)", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoaderOptions o;
  o.batch_size = 4;
  o.seed = 2;
  for (int workers : {0, 1, 2}) {  // 2 workers: each counts its batches from the first one
    CAPTURE(workers);
    o.num_workers = workers;
    DataLoader loader(ds, o);
    const auto whole = labels_of(loader, 3);  // batches of 4, 4, 2 with -1 after each
    loader.start_epoch(3, 1);
    std::vector<std::int64_t> rest;
    Batch b;
    std::int64_t first_index = -1;
    while (loader.next(b)) {
      if (first_index < 0) first_index = b.index;
      const auto v = b.labels.to_vector<std::int64_t>();
      rest.insert(rest.end(), v.begin(), v.end());
      rest.push_back(-1);
    }
    CHECK(first_index == 1);
    CHECK(rest == std::vector<std::int64_t>(whole.begin() + 5, whole.end()));
    loader.start_epoch(3, 3);  // at the end: nothing left
    CHECK_FALSE(loader.next(b));
    CHECK_THROWS_WITH(loader.start_epoch(3, 4), Catch::Contains("it has 3 batches"));
  }
}

TEST_CASE("DataLoader on CUDA delivers the CPU loader's batches", "[gpu][data][loader]") {
  auto ds = std::make_shared<SyntheticDataset>(300, Shape{1, 5, 5}, 4, 2);
  DataLoaderOptions o;
  o.batch_size = 64;
  DataLoader cpu(ds, o);
  // Loaded in next() from pageable memory, and by two workers into pinned memory (the
  // asynchronous copy), over two epochs.
  for (bool workers_and_pinned : {false, true}) {
    CAPTURE(workers_and_pinned);
    o.device = Device::cuda(0);
    o.num_workers = workers_and_pinned ? 2 : 0;
    o.pin_memory = workers_and_pinned;
    DataLoader gpu(ds, o);
    for (std::int64_t epoch : {1, 2}) {
      cpu.start_epoch(epoch);
      gpu.start_epoch(epoch);
      Batch a, b;
      while (cpu.next(a)) {
        REQUIRE(gpu.next(b));
        CHECK(b.inputs.device() == Device::cuda(0));
        CHECK(b.inputs.to_vector<float>() == a.inputs.to_vector<float>());
        CHECK(b.labels.to_vector<std::int64_t>() == a.labels.to_vector<std::int64_t>());
      }
      CHECK_FALSE(gpu.next(b));
    }
  }
}
