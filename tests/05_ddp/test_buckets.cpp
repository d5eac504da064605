// Lesson 05, task 1: bucket assignment, checked against hand-worked examples.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "ddp_lesson.h"

namespace l05 = mgpu::lesson05;
using mgpu::DType;
using mgpu::parallel::GradSpec;
using Buckets = std::vector<std::vector<std::size_t>>;

namespace {

std::vector<GradSpec> f32_sizes(const std::vector<std::size_t>& bytes) {
  std::vector<GradSpec> out;
  for (std::size_t b : bytes) out.push_back(GradSpec{b, DType::f32});
  return out;
}

}  // namespace

TEST_CASE("task1: buckets fill from the last parameter and close once they reach the cap",
          "[05_ddp][task1][points:3]") {
  const auto t = f32_sizes({100, 200, 300, 400});
  // 400 + 300 = 700 >= 500 closes [3, 2]; 200 + 100 is left for the end.
  CHECK(l05::compute_bucket_assignment_by_size(t, {500}) == Buckets{{3, 2}, {1, 0}});
  // Reaching the cap exactly closes the bucket: 400 + 300 + 200 = 900.
  CHECK(l05::compute_bucket_assignment_by_size(t, {900}) == Buckets{{3, 2, 1}, {0}});
  // Just below: everything in one bucket.
  CHECK(l05::compute_bucket_assignment_by_size(t, {1001}) == Buckets{{3, 2, 1, 0}});
  // A tensor bigger than the cap gets a bucket alone; cap 0 gives one bucket per tensor.
  CHECK(l05::compute_bucket_assignment_by_size(t, {250}) == Buckets{{3}, {2}, {1, 0}});
  CHECK(l05::compute_bucket_assignment_by_size(t, {0}) == Buckets{{3}, {2}, {1}, {0}});
  // Nothing to assign: no bucket.
  CHECK(l05::compute_bucket_assignment_by_size({}, {500}).empty());
}

TEST_CASE("task1: the first bucket has its own, smaller cap", "[05_ddp][task1][points:2]") {
  const auto t = f32_sizes({100, 200, 300, 400, 50});
  // First cap 400: [4, 3] (450). Then cap 500: [2, 1] (500), [0].
  CHECK(l05::compute_bucket_assignment_by_size(t, {400, 500}) == Buckets{{4, 3}, {2, 1}, {0}});
  // Limits after the second repeat the last one.
  CHECK(l05::compute_bucket_assignment_by_size(f32_sizes({10, 10, 10, 10, 10, 10}), {10, 20}) ==
        Buckets{{5}, {4, 3}, {2, 1}, {0}});
  // PyTorch's defaults on a realistic model: a 1 MiB first bucket, then 25 MiB.
  const std::size_t mib = 1024 * 1024;
  const auto model = f32_sizes({4 * mib, 4096, 8 * mib, 256, 512 * 1024, 40});
  CHECK(l05::compute_bucket_assignment_by_size(
            model, {mgpu::parallel::kDefaultFirstBucketCapBytes,
                    mgpu::parallel::kDefaultBucketCapBytes}) == Buckets{{5, 4, 3, 2}, {1, 0}});
}

TEST_CASE("task1: one dtype per bucket, buckets ordered by their first gradient",
          "[05_ddp][task1][points:2]") {
  std::vector<GradSpec> t{{100, DType::f32}, {80, DType::f64}, {100, DType::f32},
                          {80, DType::f64},  {100, DType::f32}};
  // Walk 4 (f32), 3 (f64), 2 (f32: 200 >= 150 closes [4, 2]), 1 (f64: 160 closes [3, 1]), 0.
  CHECK(l05::compute_bucket_assignment_by_size(t, {150}) == Buckets{{4, 2}, {3, 1}, {0}});
  // Each dtype gets its own small first bucket.
  CHECK(l05::compute_bucket_assignment_by_size(t, {50, 1000}) == Buckets{{4}, {3}, {2, 0}, {1}});
}
