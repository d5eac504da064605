// all_to_all on the mpi backend: equal and unequal pieces in every dtype, empty pieces, and
// the refusals of bad split sizes (c10d's phrases). Each element encodes where it comes from
// and where it goes, so a piece at the wrong place or from the wrong rank shows.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dist_test_util.h"
#include "expect_error.h"

using namespace mgpu;
using mgpu::testing::cpu_group;
using mgpu::testing::make_tensor;
using mgpu::testing::values_of;

namespace {

constexpr std::int64_t kRow = 2;  // elements per row

// Rows rank `src` sends to rank `dst`: 0, 1 or 2, different for most pairs.
std::int64_t rows_between(int src, int dst, bool equal) { return equal ? 2 : (src + 2 * dst + 1) % 3; }

// Element `col` of row `row` of the piece src sends to dst (exact in every dtype).
double value(int src, int dst, std::int64_t row, std::int64_t col) {
  return static_cast<double>(src * 64 + dst * 16 + row * kRow + col);
}

// Runs one all_to_all of `dtype` and checks every element this rank receives.
void check_exchange(bool equal, DType dtype) {
  dist::ProcessGroup& g = cpu_group();
  const int P = g.size(), me = g.rank();
  std::vector<std::int64_t> in_splits, out_splits;
  std::vector<double> in, want;
  for (int q = 0; q < P; ++q) {
    in_splits.push_back(rows_between(me, q, equal));
    out_splits.push_back(rows_between(q, me, equal));
    for (std::int64_t r = 0; r < in_splits.back(); ++r)
      for (std::int64_t c = 0; c < kRow; ++c) in.push_back(value(me, q, r, c));
    for (std::int64_t r = 0; r < out_splits.back(); ++r)
      for (std::int64_t c = 0; c < kRow; ++c) want.push_back(value(q, me, r, c));
  }
  const auto rows = [](const std::vector<double>& v) { return static_cast<std::int64_t>(v.size()) / kRow; };
  Tensor input = make_tensor(in, dtype).reshape({rows(in), kRow});
  Tensor output = Tensor::full({rows(want), kRow}, -1.0, dtype);
  if (equal) {
    g.all_to_all(output, input).wait();
  } else {
    g.all_to_all(output, input, out_splits, in_splits).wait();
  }
  CHECK(values_of(output) == want);
}

}  // namespace

TEST_CASE("all_to_all with equal pieces: rank q's piece r lands at place q of rank r", "[dist][all_to_all]") {
  for (DType dtype : mgpu::testing::all_dtypes()) {
    INFO(dtype_name(dtype));
    check_exchange(true, dtype);
  }
}

TEST_CASE("all_to_all with split sizes: unequal and empty pieces", "[dist][all_to_all]") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i64}) {
    INFO(dtype_name(dtype));
    check_exchange(false, dtype);
  }
}

TEST_CASE("all_to_all counts as one collective", "[dist][all_to_all]") {
  dist::ProcessGroup& g = cpu_group();
  const std::int64_t before = g.collectives_issued();
  Tensor in = Tensor::zeros({2 * g.size(), 3}), out = Tensor::zeros({2 * g.size(), 3});
  g.all_to_all(out, in).wait();
  CHECK(g.collectives_issued() == before + 1);
}

TEST_CASE("all_to_all refuses bad split sizes with c10d's words", "[dist][all_to_all]") {
  using mgpu::testing::contains;
  using mgpu::testing::error_of;
  dist::ProcessGroup& g = cpu_group();
  const int P = g.size();
  Tensor in = Tensor::zeros({2 * P + 1, 2}), out = Tensor::zeros({2 * P + 1, 2});
  if (P > 1)
    CHECK(contains(error_of([&] { g.all_to_all(out, in); }),
                   "Tensor's dim 0 does not divide equally across group size"));
  const std::vector<std::int64_t> short_list(static_cast<std::size_t>(P + 1), 0);
  CHECK(contains(error_of([&] { g.all_to_all(out, in, short_list, short_list); }),
                 "Number of tensor splits not equal to group size"));
  std::vector<std::int64_t> wrong_sum(static_cast<std::size_t>(P), 0);
  wrong_sum[0] = 2 * P;  // one row short of 2P + 1
  CHECK(contains(error_of([&] { g.all_to_all(out, in, wrong_sum, wrong_sum); }),
                 "Split sizes doesn't match total dim 0 size"));
  Tensor other_rows = Tensor::zeros({2 * P + 1, 3});
  CHECK(contains(error_of([&] { g.all_to_all(other_rows, in); }), "rows of the same shape and dtype"));
  CHECK(contains(error_of([&] { g.all_to_all(in, in); }), "overlaps output"));
}
