// Lesson 04, tasks 1-3: the ring, graded under mpirun at 2 and 3 ranks (and 4 in CI).
// Integer data gives exact expected values; lengths that p does not divide, and shorter
// than p, catch off-by-one chunking; the counting group checks the message count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "collectives_test_util.h"
#include "grade_record.h"
#include "mgpu/dist/ring.h"

using namespace mgpu;
using namespace mgpu::dist;
using mgpu::testing::CountingGroup;
using mgpu::testing::lesson_group;

namespace {

// Rank r's element i: distinct per rank and element, small enough to stay exact.
std::int64_t value(int rank, std::int64_t i) { return (i * 37 + rank * 1000 + 11) % 5003 - 2000; }

Tensor rank_tensor(int rank, std::int64_t n, DType dtype) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = value(rank, i);
  Tensor t = Tensor::from_vector(v, {n});
  return dtype == DType::i64 ? t : t.to(dtype);
}

std::int64_t total(int p, std::int64_t i) {
  std::int64_t s = 0;
  for (int r = 0; r < p; ++r) s += value(r, i);
  return s;
}

std::vector<std::int64_t> as_i64(const Tensor& t) { return t.to(DType::i64).to_vector<std::int64_t>(); }

// Lengths: multiples of p, not multiples, shorter than p, a single element, empty.
std::vector<std::int64_t> lengths(int p) {
  return {4 * p, 4 * p + 1, 7 * p - 1, 1001, p - 1, 1, 0};
}

}  // namespace

TEST_CASE("ring_reduce_scatter: rank r holds the exact sum of chunk r", "[04_collectives][task1][points:3]") {
  CountingGroup pg(lesson_group());
  const int p = pg.size(), r = pg.rank();
  for (DType dt : {DType::i64, DType::i32}) {
    for (std::int64_t n : lengths(p)) {
      CAPTURE(p, r, n, dtype_name(dt));
      Tensor data = rank_tensor(r, n, dt);
      ring_reduce_scatter(pg, data);
      ChunkRange mine = chunk_range(n, p, r);
      std::vector<std::int64_t> got = as_i64(data);
      std::int64_t wrong = 0;
      for (std::int64_t i = mine.begin; i < mine.end; ++i) wrong += got[i] != total(p, i);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("ring_reduce_scatter sends exactly p-1 chunks", "[04_collectives][task1][points:1]") {
  CountingGroup pg(lesson_group());
  const int p = pg.size();
  Tensor data = rank_tensor(pg.rank(), 10 * p + 3, DType::i64);
  ring_reduce_scatter(pg, data);
  CHECK(pg.sends() == p - 1);
  CHECK(pg.recvs() == p - 1);
}

TEST_CASE("ring_all_gather: every rank ends with every rank's chunk", "[04_collectives][task2][points:3]") {
  CountingGroup pg(lesson_group());
  const int p = pg.size(), r = pg.rank();
  for (std::int64_t n : lengths(p)) {
    CAPTURE(p, r, n);
    // Only chunk r is meaningful on rank r; the rest is junk that must be overwritten.
    std::vector<std::int64_t> v(static_cast<std::size_t>(n), -777);
    ChunkRange mine = chunk_range(n, p, r);
    for (std::int64_t i = mine.begin; i < mine.end; ++i) v[i] = total(p, i);
    Tensor data = Tensor::from_vector(v, {n});
    pg.reset();
    ring_all_gather(pg, data);
    std::vector<std::int64_t> got = as_i64(data);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) wrong += got[i] != total(p, i);
    CHECK(wrong == 0);
    CHECK(pg.sends() == p - 1);
  }
}

TEST_CASE("ring_all_reduce: exact sums on integers, any length, any shape", "[04_collectives][task3][points:3]") {
  CountingGroup pg(lesson_group());
  const int p = pg.size(), r = pg.rank();
  for (std::int64_t n : lengths(p)) {
    CAPTURE(p, r, n);
    Tensor data = rank_tensor(r, n, DType::i64);
    ring_all_reduce(pg, data);
    std::vector<std::int64_t> got = as_i64(data);
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) wrong += got[i] != total(p, i);
    CHECK(wrong == 0);
  }
  // A 2-D tensor: the ring works on the flattened elements.
  Tensor m = rank_tensor(r, 3 * 7, DType::i32).reshape({3, 7});
  ring_all_reduce(pg, m);
  std::vector<std::int64_t> got = as_i64(m);
  for (std::int64_t i = 0; i < 21; ++i) CHECK(got[i] == total(p, i));
}

TEST_CASE("ring_all_reduce sends 2(p-1) chunks and 2(p-1)/p of the data", "[04_collectives][task3][points:2]") {
  CountingGroup pg(lesson_group());
  const int p = pg.size();
  const std::int64_t n = 12 * p + 5;
  Tensor data = rank_tensor(pg.rank(), n, DType::i64);
  ring_all_reduce(pg, data);
  CHECK(pg.sends() == 2 * (p - 1));
  CHECK(pg.recvs() == 2 * (p - 1));
  // Each rank forwards p-1 chunks in each phase: close to (p-1)/p of the data, twice.
  const double ideal = 2.0 * (p - 1) / p * n * 8;
  CHECK(std::abs(pg.bytes_sent() - ideal) <= 2.0 * (p - 1) * 8);
}

TEST_CASE("ring_all_reduce on floats matches the library's all_reduce", "[04_collectives][task3][points:2]") {
  CountingGroup pg(lesson_group());
  dist::ProcessGroup& lib = lesson_group();
  const int p = pg.size(), r = pg.rank();
  for (DType dt : {DType::f32, DType::f64}) {
    for (std::int64_t n : {std::int64_t(1), std::int64_t(3 * p + 2), std::int64_t(100003)}) {
      CAPTURE(p, r, n, dtype_name(dt));
      std::vector<double> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[i] = std::sin(0.001 * i * (r + 1)) * (r + 1.5);
      Tensor mine = Tensor::from_vector(v, {n}).to(dt);
      Tensor ref = mine.clone();
      ring_all_reduce(pg, mine);
      lib.all_reduce(ref).wait();
      std::vector<double> a = mine.to_vector<double>(), b = ref.to_vector<double>();
      // Different summation orders round differently: compare within a few ulps.
      const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
      double worst = 0;
      for (std::int64_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i])));
      char rel[32];
      std::snprintf(rel, sizeof rel, "rel:%g", 2.0001 * tol);
      mgpu::testing::record(std::string(dtype_name(dt)) + " n=" + std::to_string(n), a, rel);
      CHECK(worst <= tol);
    }
  }
}

TEST_CASE("the ring uses send and recv only, never a collective", "[04_collectives][task3][points:1]") {
  CountingGroup pg(lesson_group());
  Tensor data = rank_tensor(pg.rank(), 5 * pg.size(), DType::i64);
  CHECK_NOTHROW(ring_all_reduce(pg, data));
  mgpu::testing::record("result", data, 0.0);
  CHECK(pg.sends() > 0);
}

TEST_CASE("ring all-reduce on CUDA tensors matches the CPU", "[04_collectives][gpu]") {
  // The mpi backend stages CUDA tensors through pinned memory; the adds run on the GPU.
  const Device dev = dist::rank_device(Device::Kind::cuda);
  CountingGroup pg(mgpu::testing::rank_gpu_group());
  const int p = pg.size(), r = pg.rank();
  const std::int64_t n = 10 * p + 3;
  Tensor data = rank_tensor(r, n, DType::f32).to(dev);
  ring_all_reduce(pg, data);
  std::vector<std::int64_t> got = as_i64(data);
  for (std::int64_t i = 0; i < n; ++i) CHECK(got[i] == total(p, i));
}
