// Lesson 05, task 4: DistributedSampler's indices with PyTorch's rules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "ddp_lesson.h"
#include "mgpu/data/sampler.h"

namespace l05 = mgpu::lesson05;
using Indices = std::vector<std::int64_t>;

namespace {

std::vector<Indices> shares(std::int64_t n, int w, bool shuffle, std::uint64_t seed, bool drop_last,
                            std::int64_t epoch) {
  std::vector<Indices> out;
  for (int r = 0; r < w; ++r) out.push_back(l05::DistributedSampler(n, w, r, shuffle, seed, drop_last).indices(epoch));
  return out;
}

}  // namespace

TEST_CASE("task4: N = 10 over W = 3 ranks, padded by repeating the head",
          "[05_ddp][task4][points:3]") {
  for (int r = 0; r < 3; ++r) CHECK(l05::DistributedSampler(10, 3, r, false).num_samples() == 4);
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

TEST_CASE("task4: drop_last cuts the tail instead", "[05_ddp][task4][points:2]") {
  for (int r = 0; r < 3; ++r)
    CHECK(l05::DistributedSampler(10, 3, r, false, 0, true).num_samples() == 3);
  const auto s = shares(10, 3, false, 0, true, 0);
  CHECK(s[0] == Indices{0, 3, 6});
  CHECK(s[1] == Indices{1, 4, 7});
  CHECK(s[2] == Indices{2, 5, 8});
  // When W divides N, drop_last changes nothing.
  CHECK(shares(9, 3, false, 0, true, 0) == shares(9, 3, false, 0, false, 0));
  CHECK(l05::DistributedSampler(9, 3, 0, false, 0, true).num_samples() == 3);
}

TEST_CASE("task4: shuffling is the same permutation on every rank, new each epoch",
          "[05_ddp][task4][points:3]") {
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
  // set_epoch + indices() is PyTorch's spelling of indices(epoch).
  l05::DistributedSampler sampler(n, w, 1, true, 42);
  sampler.set_epoch(3);
  CHECK(sampler.indices() == sampler.indices(3));
  CHECK(sampler.indices(3) != sampler.indices(4));
}
