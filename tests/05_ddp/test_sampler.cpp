// Lesson 05, task 5: DistributedSampler's indices with PyTorch's rules, and set_epoch.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "mgpu/data/dataloader.h"
#include "mgpu/data/dataset.h"
#include "mgpu/data/sampler.h"
#include "mgpu/parallel/ddp/distributed_sampler.h"

using mgpu::parallel::DistributedSampler;
using Indices = std::vector<std::int64_t>;

namespace {

std::vector<Indices> shares(std::int64_t n, int w, bool shuffle, std::uint64_t seed, bool drop_last,
                            std::int64_t epoch) {
  std::vector<Indices> out;
  for (int r = 0; r < w; ++r) {
    DistributedSampler s(n, w, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

}  // namespace

TEST_CASE("task5: N = 10 over W = 3 ranks, padded by repeating the head",
          "[05_ddp][task5][points:3]") {
  for (int r = 0; r < 3; ++r) CHECK(DistributedSampler(10, 3, r, false).num_samples() == 4);
  const auto s = shares(10, 3, false, 0, false, 0);
  CHECK(s[0] == Indices{0, 3, 6, 9});
  CHECK(s[1] == Indices{1, 4, 7, 0});
  CHECK(s[2] == Indices{2, 5, 8, 1});
  // Fewer samples than ranks: the head repeats as often as needed.
  const auto tiny = shares(2, 3, false, 0, false, 0);
  CHECK(tiny == std::vector<Indices>{{0}, {1}, {0}});
  const auto tiny5 = shares(2, 5, false, 0, false, 0);
  CHECK(tiny5 == std::vector<Indices>{{0}, {1}, {0}, {1}, {0}});
}

TEST_CASE("task5: drop_last cuts the tail instead", "[05_ddp][task5][points:2]") {
  for (int r = 0; r < 3; ++r) CHECK(DistributedSampler(10, 3, r, false, 0, true).num_samples() == 3);
  const auto s = shares(10, 3, false, 0, true, 0);
  CHECK(s[0] == Indices{0, 3, 6});
  CHECK(s[1] == Indices{1, 4, 7});
  CHECK(s[2] == Indices{2, 5, 8});
  // When W divides N, drop_last changes nothing.
  CHECK(shares(9, 3, false, 0, true, 0) == shares(9, 3, false, 0, false, 0));
  CHECK(DistributedSampler(9, 3, 0, false, 0, true).num_samples() == 3);
}

TEST_CASE("task5: the shuffle is the same permutation on every rank, the one of set_epoch's epoch",
          "[05_ddp][task5][points:3]") {
  const std::int64_t n = 10;
  const int w = 3;
  for (std::int64_t epoch : {0, 1, 5}) {
    const Indices perm = mgpu::data::shuffled_indices(n, 42, epoch);
    const auto s = shares(n, w, true, 42, false, epoch);
    // Rank r takes positions r, r + 3, ... of the permutation padded with its own head.
    Indices padded = perm;
    padded.push_back(perm[0]);
    padded.push_back(perm[1]);
    for (int r = 0; r < w; ++r) {
      Indices want;
      for (std::size_t i = static_cast<std::size_t>(r); i < padded.size(); i += w) want.push_back(padded[i]);
      CHECK(s[static_cast<std::size_t>(r)] == want);
    }
    // Together the ranks cover the whole dataset.
    std::set<std::int64_t> all;
    for (const auto& x : s) all.insert(x.begin(), x.end());
    CHECK(all.size() == static_cast<std::size_t>(n));
  }
}

// A dataset whose sample i is the number i: a batch shows the order the loader visited.
class Numbers : public mgpu::data::Dataset {
 public:
  explicit Numbers(std::int64_t n) : n_(n) {}
  std::int64_t size() const override { return n_; }
  mgpu::Shape sample_shape() const override { return {1}; }
  std::int64_t num_classes() const override { return 1; }
  std::int64_t get(std::int64_t i, float* out) const override {
    out[0] = static_cast<float>(i);
    return 0;
  }
  std::string describe() const override { return "numbers"; }

 private:
  std::int64_t n_;
};

Indices one_epoch(mgpu::data::DataLoader& loader, std::int64_t loader_epoch) {
  loader.start_epoch(loader_epoch);
  Indices seen;
  mgpu::data::Batch b;
  while (loader.next(b))
    for (float v : b.inputs.to_vector<float>()) seen.push_back(static_cast<std::int64_t>(v));
  return seen;
}

TEST_CASE("task5: a DataLoader follows set_epoch, not its own epoch count: forgetting "
          "set_epoch repeats the first order",
          "[05_ddp][task5][points:2]") {
  auto sampler = std::make_shared<DistributedSampler>(40, 2, 1, /*shuffle=*/true, /*seed=*/3);
  mgpu::data::DataLoaderOptions o;
  o.batch_size = 8;
  o.num_workers = 0;
  mgpu::data::DataLoader loader(std::make_shared<Numbers>(40), o, sampler);
  const Indices first = one_epoch(loader, 0);
  CHECK(first == sampler->indices());
  // The pitfall: the loader starts epoch 1, but the sampler was not told.
  CHECK(one_epoch(loader, 1) == first);
  // PyTorch's loop: set_epoch(e) before each epoch gives a new order.
  sampler->set_epoch(1);
  const Indices second = one_epoch(loader, 1);
  CHECK(second != first);
  DistributedSampler fresh(40, 2, 1, true, 3);
  fresh.set_epoch(1);
  CHECK(second == fresh.indices());
}
