// Lesson 05, task 1: bucket assignment with PyTorch's rules, checked against hand-worked
// examples (registration-order walk, caps per dtype, sorting only without tensor_indices).
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "mgpu/parallel/ddp/bucket_assignment.h"

using mgpu::DType;
using mgpu::parallel::compute_bucket_assignment_by_size;
using mgpu::parallel::GradSpec;
using Buckets = std::vector<std::vector<std::size_t>>;

namespace {

std::vector<GradSpec> f32_sizes(const std::vector<std::size_t>& bytes) {
  std::vector<GradSpec> out;
  for (std::size_t b : bytes) out.push_back(GradSpec{b, DType::f32});
  return out;
}

}  // namespace

TEST_CASE("task1: buckets fill in the order given and close once they reach the cap",
          "[05_ddp][task1][points:3]") {
  const auto t = f32_sizes({100, 200, 300, 400});
  // 100 + 200 + 300 = 600 >= 500 closes [0, 1, 2]; 400 is left for the end.
  CHECK(compute_bucket_assignment_by_size(t, {500}) == Buckets{{0, 1, 2}, {3}});
  // Reaching the cap exactly closes the bucket; one byte more and it stays open.
  CHECK(compute_bucket_assignment_by_size(t, {600}) == Buckets{{0, 1, 2}, {3}});
  CHECK(compute_bucket_assignment_by_size(t, {601}) == Buckets{{0, 1, 2, 3}});
  // A tensor bigger than the cap gets a bucket alone; cap 0 gives one bucket per tensor.
  CHECK(compute_bucket_assignment_by_size(t, {250}) == Buckets{{0, 1}, {2}, {3}});
  CHECK(compute_bucket_assignment_by_size(t, {0}) == Buckets{{0}, {1}, {2}, {3}});
  // Nothing to assign: no bucket.
  CHECK(compute_bucket_assignment_by_size({}, {500}).empty());
}

TEST_CASE("task1: the first bucket has its own cap, then the next caps in turn",
          "[05_ddp][task1][points:2]") {
  // First cap 100: [0, 1] (150). Then cap 500: [2, 3] (500), and [4] at the end.
  CHECK(compute_bucket_assignment_by_size(f32_sizes({50, 100, 200, 300, 400}), {100, 500}) ==
        Buckets{{0, 1}, {2, 3}, {4}});
  // Limits after the second repeat the last one.
  CHECK(compute_bucket_assignment_by_size(f32_sizes({10, 10, 10, 10, 10, 10}), {10, 20}) ==
        Buckets{{0}, {1, 2}, {3, 4}, {5}});
  // PyTorch's defaults on a model whose first parameter is 4 MiB: it fills the 1 MiB first
  // bucket alone; everything after it shares one 25 MiB bucket.
  const std::size_t mib = 1024 * 1024;
  CHECK(compute_bucket_assignment_by_size(
            f32_sizes({4 * mib, 4096, 8 * mib, 256, 512 * 1024, 40}),
            {mgpu::parallel::kDefaultFirstBucketCapBytes,
             mgpu::parallel::kDefaultBucketCapBytes}) == Buckets{{0}, {1, 2, 3, 4, 5}});
}

TEST_CASE("task1: one open bucket and one cap sequence per dtype; buckets sorted by their "
          "smallest index",
          "[05_ddp][task1][points:3]") {
  std::vector<GradSpec> t{{100, DType::f32}, {80, DType::f64}, {100, DType::f32},
                          {80, DType::f64},  {100, DType::f32}};
  // Walk 0 (f32), 1 (f64), 2 (f32: 200 >= 150 closes [0, 2]), 3 (f64: 160 closes [1, 3]), 4.
  CHECK(compute_bucket_assignment_by_size(t, {150}) == Buckets{{0, 2}, {1, 3}, {4}});
  // Each dtype gets its own small first bucket: [0] and [1]; then [2, 4] and [3] at the end.
  CHECK(compute_bucket_assignment_by_size(t, {50, 1000}) == Buckets{{0}, {1}, {2, 4}, {3}});
  // The f64 bucket closes first, but [0, 2] holds the smaller index: it comes first.
  std::vector<GradSpec> late{{10, DType::f32}, {200, DType::f64}, {200, DType::f32}};
  CHECK(compute_bucket_assignment_by_size(late, {100}) == Buckets{{0, 2}, {1}});
}

TEST_CASE("task1: with tensor_indices (the rebuild) buckets hold those indices and keep the "
          "order they closed in",
          "[05_ddp][task1][points:2]") {
  // Gradients became ready in the order 3, 2, 1, 0 (the last layer first).
  const auto ready = f32_sizes({400, 300, 200, 100});
  CHECK(compute_bucket_assignment_by_size(ready, {500, 1000}, {3, 2, 1, 0}) ==
        Buckets{{3, 2}, {1, 0}});
  // Not sorted by index: [4, 5] closed first and stays first.
  CHECK(compute_bucket_assignment_by_size(f32_sizes({100, 100, 100}), {150}, {4, 5, 0}) ==
        Buckets{{4, 5}, {0}});
}
