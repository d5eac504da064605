// Every collective of the mpi backend on CPU tensors, in every dtype, at sizes 0, 1 and
// sizes that the world size does not divide. Expected values are computed here from the
// per-rank data, which every rank can regenerate.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "dist_test_util.h"

using namespace mgpu;
using mgpu::testing::cpu_group;
using mgpu::testing::make_tensor;
using mgpu::testing::rank_values;
using mgpu::testing::values_of;

namespace {

const std::vector<std::int64_t> kSizes{0, 1, 5, 13, 1001};

// op over every rank's rank_values, element by element.
std::vector<double> expected_reduce(dist::ReduceOp op, int world, std::int64_t n, int salt = 0) {
  std::vector<double> out = rank_values(0, n, salt);
  for (int r = 1; r < world; ++r) {
    std::vector<double> v = rank_values(r, n, salt);
    for (std::int64_t i = 0; i < n; ++i) {
      if (op == dist::ReduceOp::max) out[i] = std::max(out[i], v[i]);
      else if (op == dist::ReduceOp::min) out[i] = std::min(out[i], v[i]);
      else out[i] += v[i];
    }
  }
  if (op == dist::ReduceOp::avg)
    for (double& x : out) x /= world;
  return out;
}

// Every rank's rank_values(r, n), in rank order: what all_gather gives.
std::vector<double> gathered_values(int world, std::int64_t n) {
  std::vector<double> out;
  for (int r = 0; r < world; ++r) {
    const std::vector<double> v = rank_values(r, n);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// avg results are rounded to the dtype once: compare with that dtype's rounding of the
// exact mean.
std::vector<double> rounded(const std::vector<double>& v, DType t) {
  return values_of(make_tensor(v, t));
}

// f(t, n, root) for every dtype, size of kSizes and root, t holding this rank's rank_values.
template <class F>
void for_each_rooted_case(dist::ProcessGroup& pg, F&& f) {
  for (DType dt : mgpu::testing::all_dtypes()) {
    for (std::int64_t n : kSizes) {
      for (int root = 0; root < pg.size(); ++root) {
        CAPTURE(dtype_name(dt), n, root);
        Tensor t = make_tensor(rank_values(pg.rank(), n), dt);
        f(t, n, root);
      }
    }
  }
}

}  // namespace

TEST_CASE("all_reduce sum, max, min: exact in every dtype and size", "[dist][all_reduce]") {
  auto& pg = cpu_group();
  for (DType dt : mgpu::testing::all_dtypes()) {
    for (std::int64_t n : kSizes) {
      for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::max, dist::ReduceOp::min}) {
        CAPTURE(dtype_name(dt), n, dist::reduce_op_name(op));
        Tensor t = make_tensor(rank_values(pg.rank(), n), dt);
        pg.all_reduce(t, op).wait();
        CHECK(values_of(t) == expected_reduce(op, pg.size(), n));
      }
    }
  }
}

TEST_CASE("all_reduce avg divides the sum by the world size", "[dist][all_reduce]") {
  auto& pg = cpu_group();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (std::int64_t n : kSizes) {
      CAPTURE(dtype_name(dt), n);
      Tensor t = make_tensor(rank_values(pg.rank(), n), dt);
      pg.all_reduce(t, dist::ReduceOp::avg).wait();
      CHECK(values_of(t) == rounded(expected_reduce(dist::ReduceOp::avg, pg.size(), n), dt));
    }
  }
  Tensor ints = make_tensor({1, 2, 3}, DType::i32);
  CHECK_THROWS_WITH(pg.all_reduce(ints, dist::ReduceOp::avg), Catch::Contains("integer dtype"));
}

TEST_CASE("all_reduce works on a view and leaves the rest of the storage alone", "[dist][all_reduce]") {
  auto& pg = cpu_group();
  Tensor whole = make_tensor(std::vector<double>(10, 1.0), DType::f32);
  Tensor middle = whole.view(3, {2, 2});
  pg.all_reduce(middle).wait();
  std::vector<double> got = values_of(whole);
  for (int i = 0; i < 10; ++i) CHECK(got[i] == (i >= 3 && i < 7 ? pg.size() : 1.0));
}

TEST_CASE("broadcast copies the root's tensor to every rank", "[dist][broadcast]") {
  auto& pg = cpu_group();
  for_each_rooted_case(pg, [&](Tensor& t, std::int64_t n, int root) {
    pg.broadcast(t, root).wait();
    CHECK(values_of(t) == rank_values(root, n));
  });
  Tensor t = make_tensor({1}, DType::f32);
  CHECK_THROWS_WITH(pg.broadcast(t, pg.size()), Catch::Contains("is not a rank of this group"));
}

TEST_CASE("reduce leaves the result on the root only", "[dist][reduce]") {
  auto& pg = cpu_group();
  for_each_rooted_case(pg, [&](Tensor& t, std::int64_t n, int root) {
    pg.reduce(t, root, dist::ReduceOp::sum).wait();
    if (pg.rank() == root) {
      CHECK(values_of(t) == expected_reduce(dist::ReduceOp::sum, pg.size(), n));
    } else {
      CHECK(values_of(t) == rank_values(pg.rank(), n));
    }
  });
  Tensor t = make_tensor(rank_values(pg.rank(), 7), DType::f64);
  pg.reduce(t, 0, dist::ReduceOp::max).wait();
  if (pg.rank() == 0) CHECK(values_of(t) == expected_reduce(dist::ReduceOp::max, pg.size(), 7));
}

TEST_CASE("all_gather puts rank r's input at chunk r of every output", "[dist][all_gather]") {
  auto& pg = cpu_group();
  const int p = pg.size();
  for (DType dt : mgpu::testing::all_dtypes()) {
    for (std::int64_t n : kSizes) {
      CAPTURE(dtype_name(dt), n);
      Tensor in = make_tensor(rank_values(pg.rank(), n), dt);
      Tensor out = make_tensor(std::vector<double>(static_cast<std::size_t>(n * p), -1.0), dt);
      pg.all_gather(out, in).wait();
      CHECK(values_of(out) == gathered_values(p, n));
    }
  }
}

TEST_CASE("all_gather in place: the input is the output's own chunk", "[dist][all_gather]") {
  auto& pg = cpu_group();
  const int p = pg.size();
  const std::int64_t n = 6;
  Tensor out = make_tensor(std::vector<double>(static_cast<std::size_t>(n * p), -1.0), DType::i64);
  Tensor mine = out.slice(pg.rank() * n, (pg.rank() + 1) * n);
  auto v = rank_values(pg.rank(), n);
  for (std::int64_t i = 0; i < n; ++i) mine.data<std::int64_t>()[i] = static_cast<std::int64_t>(v[i]);
  pg.all_gather(out, mine).wait();
  CHECK(values_of(out) == gathered_values(p, n));

  Tensor wrong = make_tensor(std::vector<double>(static_cast<std::size_t>(n * p + 1), 0.0), DType::i64);
  CHECK_THROWS_WITH(pg.all_gather(wrong, mine), Catch::Contains("must hold world size"));
}

TEST_CASE("reduce_scatter gives rank r chunk r of the reduction", "[dist][reduce_scatter]") {
  auto& pg = cpu_group();
  const int p = pg.size();
  for (DType dt : mgpu::testing::all_dtypes()) {
    for (std::int64_t n : kSizes) {
      for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::max}) {
        CAPTURE(dtype_name(dt), n, dist::reduce_op_name(op));
        Tensor in = make_tensor(rank_values(pg.rank(), n * p), dt);
        Tensor out = make_tensor(std::vector<double>(static_cast<std::size_t>(n), -1.0), dt);
        pg.reduce_scatter(out, in, op).wait();
        auto all = expected_reduce(op, p, n * p);
        std::vector<double> want(all.begin() + pg.rank() * n, all.begin() + (pg.rank() + 1) * n);
        CHECK(values_of(out) == want);
      }
    }
  }
}

TEST_CASE("reduce_scatter with avg, and in place into the input's own chunk", "[dist][reduce_scatter]") {
  auto& pg = cpu_group();
  const int p = pg.size();
  const std::int64_t n = 5;
  Tensor in = make_tensor(rank_values(pg.rank(), n * p), DType::f64);
  Tensor out = in.slice(pg.rank() * n, (pg.rank() + 1) * n);
  pg.reduce_scatter(out, in, dist::ReduceOp::avg).wait();
  auto all = expected_reduce(dist::ReduceOp::avg, p, n * p);
  std::vector<double> want(all.begin() + pg.rank() * n, all.begin() + (pg.rank() + 1) * n);
  CHECK(values_of(out) == want);
}

TEST_CASE("barrier: no rank leaves before the last one arrives", "[dist][barrier]") {
  auto& pg = cpu_group();
  pg.barrier().wait();
  auto start = std::chrono::steady_clock::now();
  if (pg.rank() == pg.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  pg.barrier().wait();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(waited >= 0.15);
}

TEST_CASE("ops issued without waiting run in issue order; Work reports completion",
          "[dist][work]") {
  auto& pg = cpu_group();
  const int p = pg.size();
  // Each all_reduce multiplies the value by p (every rank holds the same value): the final
  // value is right only if the ops ran one after another on the same tensor.
  Tensor t = make_tensor({1.0, 2.0}, DType::f64);
  std::vector<dist::Work> works;
  for (int i = 0; i < 5; ++i) works.push_back(pg.all_reduce(t));
  dist::wait_all(works);
  for (auto& w : works) {
    CHECK(w.is_completed());
    CHECK(w.is_success());
  }
  double f = static_cast<double>(p) * p * p * p * p;
  CHECK(values_of(t) == std::vector<double>{f, 2 * f});
  CHECK_THAT(works[0].describe(), Catch::Contains("all_reduce #") && Catch::Contains("f64[2]"));

  // A Work dropped without waiting still runs before the next op.
  Tensor u = make_tensor({1.0}, DType::f32);
  pg.all_reduce(u);
  pg.all_reduce(u).wait();
  CHECK(values_of(u)[0] == static_cast<double>(p) * p);
}

TEST_CASE("a second group does not mix its messages with the first", "[dist][group]") {
  dist::GroupOptions o;
  o.announce = false;
  auto other = dist::new_group("mpi", Device::cpu(), o);
  auto& pg = cpu_group();
  Tensor a = make_tensor({1.0}, DType::f32);
  Tensor b = make_tensor({10.0}, DType::f32);
  dist::Work wa = pg.all_reduce(a);
  dist::Work wb = other->all_reduce(b, dist::ReduceOp::max);
  wa.wait();
  wb.wait();
  CHECK(values_of(a)[0] == pg.size());
  CHECK(values_of(b)[0] == 10.0);
}
