// Lesson 04, task 5: the pairwise all-to-all, graded under mpirun at 2 and 3 ranks (and 4 in
// CI). Every element names its sender, its receiver, its row in the piece and its column,
// so a piece in the wrong place, from the wrong rank or cut at the wrong row shows at once;
// the recording group checks who each round talks to and refuses every collective.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "collectives_test_util.h"
#include "error_measures.h"
#include "grade_record.h"
#include "mgpu/dist/all_to_all.h"

using namespace mgpu;
using namespace mgpu::dist;
using mgpu::testing::CountingGroup;
using mgpu::testing::lesson_group;
using mgpu::testing::same_bits;

namespace {

// Rows that rank `src` sends to rank `dst`: the whole pattern, known on every rank.
using Split = std::function<std::int64_t(int src, int dst)>;

// Element (row, col) of src's piece for dst: every field in its own digits, exact in f32.
std::int64_t code(int src, int dst, std::int64_t row, std::int64_t col) {
  return ((src * 8 + dst) * 64 + row) * 8 + col + 1;
}

// A tensor of rows of `row_shape`, the pieces of `from` (one per rank q, splits(q) rows)
// laid end to end: what rank r's input is (from = r as sender) or its output should be.
Tensor pieces(int p, const Shape& row_shape, DType dt, const std::function<std::int64_t(int)>& rows,
              const std::function<std::int64_t(int q, std::int64_t row, std::int64_t col)>& value) {
  const std::int64_t width = shape_numel(row_shape);
  std::vector<std::int64_t> v;
  std::int64_t total = 0;
  for (int q = 0; q < p; ++q) {
    for (std::int64_t j = 0; j < rows(q); ++j)
      for (std::int64_t c = 0; c < width; ++c) v.push_back(value(q, j, c));
    total += rows(q);
  }
  Shape shape{total};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  Tensor t = Tensor::from_vector(v, shape);
  return dt == DType::i64 ? t : t.to(dt);
}

struct Case {
  Tensor input, output, expected;
  std::vector<std::int64_t> input_splits, output_splits;
};

// Rank r's tensors for the pattern `rows`; `with_splits` false gives the equal case.
Case make_case(int p, int r, const Split& rows, const Shape& row_shape, DType dt, bool with_splits) {
  Case c;
  c.input = pieces(p, row_shape, dt, [&](int q) { return rows(r, q); },
                   [&](int q, std::int64_t j, std::int64_t col) { return code(r, q, j, col); });
  c.expected = pieces(p, row_shape, dt, [&](int q) { return rows(q, r); },
                      [&](int q, std::int64_t j, std::int64_t col) { return code(q, r, j, col); });
  c.output = Tensor::full(c.expected.shape(), -7, dt);  // junk that must be overwritten
  if (with_splits)
    for (int q = 0; q < p; ++q) c.input_splits.push_back(rows(r, q)), c.output_splits.push_back(rows(q, r));
  return c;
}

// How many rows of `got` differ from `want` (for a readable failure).
std::int64_t wrong_elements(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < g.size(); ++i) wrong += g[i] != w[i];
  return wrong;
}

// The unequal patterns: pieces of 0 to 3 rows (self and empty ones included), a rank that
// sends nothing, a rank that receives nothing, and all pieces empty.
std::vector<std::pair<std::string, Split>> unequal_patterns(int p) {
  return {
      {"mixed", [](int s, int d) { return std::int64_t((s + 2 * d + 1) % 4); }},
      {"rank 0 sends nothing", [](int s, int d) { return std::int64_t(s == 0 ? 0 : 1 + (s * d) % 3); }},
      {"the last rank receives nothing", [p](int s, int d) { return std::int64_t(d == p - 1 ? 0 : 2 + s); }},
      {"only to itself", [](int s, int d) { return std::int64_t(s == d ? 3 : 0); }},
      {"all empty", [](int, int) { return std::int64_t(0); }},
  };
}

// Passes send and recv through, counting them, and records each one's peer and length in
// the order they are posted.
class RecordingGroup : public CountingGroup {
 public:
  using CountingGroup::CountingGroup;
  std::vector<int> send_peers, recv_peers;
  std::vector<std::int64_t> send_numels, recv_numels;

  dist::Work send(const Tensor& t, int dst, int tag) override {
    log(true, t, dst);
    return CountingGroup::send(t, dst, tag);
  }
  dist::Work recv(const Tensor& t, int src, int tag) override {
    log(false, t, src);
    return CountingGroup::recv(t, src, tag);
  }
  dist::Work batch_isend_irecv(const std::vector<dist::P2POp>& ops) override {
    for (const auto& o : ops) log(o.kind == dist::P2POp::Kind::send, o.tensor, o.peer);
    return CountingGroup::batch_isend_irecv(ops);
  }

 private:
  std::mutex mu_;
  void log(bool is_send, const Tensor& t, int peer) {
    std::lock_guard<std::mutex> lock(mu_);
    (is_send ? send_peers : recv_peers).push_back(peer);
    (is_send ? send_numels : recv_numels).push_back(t.numel());
  }
};

}  // namespace

TEST_CASE("pairwise_all_to_all: equal pieces, every element where it belongs", "[04_collectives][task5][points:2]") {
  CountingGroup pg(lesson_group());
  const int p = pg.size(), r = pg.rank();
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (std::int64_t m : {1, 2, 5}) {
      for (const Shape& row : {Shape{3}, Shape{}, Shape{2, 3}}) {
        CAPTURE(p, r, dtype_name(dt), m, shape_str(row));
        Case c = make_case(p, r, [m](int, int) { return m; }, row, dt, false);
        pairwise_all_to_all(pg, c.output, c.input);
        CHECK(wrong_elements(c.output, c.expected) == 0);
        CHECK(same_bits(c.output, c.expected));
      }
    }
  }
}

TEST_CASE("pairwise_all_to_all: split sizes, empty pieces included", "[04_collectives][task5][points:2]") {
  CountingGroup pg(lesson_group());
  const int p = pg.size(), r = pg.rank();
  for (DType dt : {DType::f32, DType::f64, DType::i32}) {
    for (const auto& [name, rows] : unequal_patterns(p)) {
      CAPTURE(p, r, dtype_name(dt), name);
      Case c = make_case(p, r, rows, {4}, dt, true);
      CAPTURE(c.input_splits, c.output_splits);
      pairwise_all_to_all(pg, c.output, c.input, c.output_splits, c.input_splits);
      CHECK(wrong_elements(c.output, c.expected) == 0);
      CHECK(same_bits(c.output, c.expected));
      mgpu::testing::record(std::string(dtype_name(dt)) + " " + name, c.output, 0.0);
    }
  }
}

TEST_CASE("pairwise_all_to_all: round k sends to r+k and receives from r-k, one message each",
          "[04_collectives][task5][points:1]") {
  RecordingGroup pg(lesson_group());
  const int p = pg.size(), r = pg.rank();
  // Unequal pieces, and every rank's piece for its right neighbour empty: still a message.
  const Split rows = [p](int s, int d) { return std::int64_t(d == (s + 1) % p ? 0 : 1 + (s + d) % 3); };
  Case c = make_case(p, r, rows, {2}, DType::i64, true);
  pairwise_all_to_all(pg, c.output, c.input, c.output_splits, c.input_splits);
  CHECK(same_bits(c.output, c.expected));
  // Round k = 1 .. p-1; the own piece is a copy, never a message to itself.
  std::vector<int> to, from;
  std::vector<std::int64_t> sent, received;
  for (int k = 1; k < p; ++k) {
    to.push_back((r + k) % p), from.push_back((r - k + p) % p);
    sent.push_back(rows(r, to.back()) * 2), received.push_back(rows(from.back(), r) * 2);
  }
  CAPTURE(p, r);
  CHECK(pg.send_peers == to);
  CHECK(pg.recv_peers == from);
  CHECK(pg.send_numels == sent);
  CHECK(pg.recv_numels == received);
}

TEST_CASE("pairwise_all_to_all matches the library's all_to_all", "[04_collectives][task5][points:1]") {
  CountingGroup pg(lesson_group());
  dist::ProcessGroup& lib = lesson_group();
  const int p = pg.size(), r = pg.rank();
  for (DType dt : {DType::f32, DType::f64}) {
    // Pieces of 0 to 6 rows of 5 floats that are not integers.
    std::vector<std::int64_t> in_splits, out_splits;
    for (int q = 0; q < p; ++q)
      in_splits.push_back((3 * r + q) % 7), out_splits.push_back((3 * q + r) % 7);
    std::int64_t rows = 0;
    for (std::int64_t n : in_splits) rows += n;
    std::vector<double> v;
    for (std::int64_t i = 0; i < rows * 5; ++i) v.push_back(std::sin(0.37 * i + r) * (r + 1.25));
    Tensor input = Tensor::from_vector(v, {rows, 5}).to(dt);
    std::int64_t out_rows = 0;
    for (std::int64_t n : out_splits) out_rows += n;
    Tensor mine = Tensor::zeros({out_rows, 5}, dt), ref = Tensor::zeros({out_rows, 5}, dt);
    CAPTURE(p, r, dtype_name(dt), in_splits, out_splits);
    pairwise_all_to_all(pg, mine, input, out_splits, in_splits);
    lib.all_to_all(ref, input, out_splits, in_splits).wait();
    CHECK(same_bits(mine, ref));
    mgpu::testing::record(std::string(dtype_name(dt)), mine, 0.0);
  }
}

TEST_CASE("pairwise_all_to_all: large unequal pieces do not deadlock", "[04_collectives][task5][points:1]") {
  // Pieces of up to 3 MB: far above MPI's eager limit, so a send completes only once its
  // receive is posted. A round that waits for its send first hangs here (the group's
  // timeout then ends the job) where small pieces would pass.
  CountingGroup pg(lesson_group());
  const int p = pg.size(), r = pg.rank();
  // Rows of 2 doubles (sender and receiver, row in the piece): 0, 64 Ki or 128 Ki rows, +1
  // off the diagonal, so that no two pieces a rank sends or receives are alike.
  const Split rows = [](int s, int d) { return std::int64_t(((s + 2 * d) % 3) * 65536 + (s == d ? 0 : 1)); };
  std::vector<std::int64_t> in_splits, out_splits;
  for (int q = 0; q < p; ++q) in_splits.push_back(rows(r, q)), out_splits.push_back(rows(q, r));
  std::int64_t in_rows = 0, out_rows = 0;
  for (int q = 0; q < p; ++q) in_rows += in_splits[q], out_rows += out_splits[q];
  std::vector<double> v(static_cast<std::size_t>(in_rows * 2));
  std::int64_t i = 0;
  for (int q = 0; q < p; ++q)
    for (std::int64_t j = 0; j < in_splits[q]; ++j, i += 2) v[i] = r * 8 + q, v[i + 1] = double(j);
  Tensor input = Tensor::from_vector(v, {in_rows, 2});
  Tensor output = Tensor::full({out_rows, 2}, -1.0, DType::f64);
  CAPTURE(p, r, in_splits, out_splits);
  pairwise_all_to_all(pg, output, input, out_splits, in_splits);
  std::vector<double> got = output.to_vector<double>();
  std::int64_t wrong = 0, at = 0;
  for (int q = 0; q < p; ++q)
    for (std::int64_t j = 0; j < out_splits[q]; ++j, at += 2)
      wrong += got[at] != q * 8 + r || got[at + 1] != double(j);
  CHECK(wrong == 0);
  CHECK(pg.sends() == p - 1);
}

TEST_CASE("pairwise_all_to_all refuses bad input with the library's message, before any message",
          "[04_collectives][task5][points:1]") {
  RecordingGroup pg(lesson_group());
  dist::ProcessGroup& lib = lesson_group();
  const int p = pg.size();
  const std::vector<std::int64_t> ones(static_cast<std::size_t>(p), 1);
  std::vector<std::int64_t> short_list(ones.begin(), ones.end() - 1), negative = ones;
  negative[0] = -1, negative[1] = 3;  // sums to p all the same
  Tensor in = Tensor::zeros({p, 2}), out = Tensor::zeros({p, 2});
  Tensor both = Tensor::zeros({2 * p, 2});
  struct Bad {
    std::string what;
    Tensor output, input;
    std::vector<std::int64_t> out_splits, in_splits;
  };
  const std::vector<Bad> bad = {
      {"dim 0 not a multiple of p", Tensor::zeros({p + 1, 2}), Tensor::zeros({p + 1, 2}), {}, {}},
      {"a split list one short", out, in, ones, short_list},
      {"splits that do not sum to dim 0", out, in, ones, std::vector<std::int64_t>(p, 2)},
      {"a negative split", out, in, negative, ones},
      {"rows of another shape", Tensor::zeros({p, 3}), in, {}, {}},
      {"another dtype", Tensor::zeros({p, 2}, DType::f64), in, {}, {}},
      {"a 0-d tensor", Tensor::zeros({}), Tensor::zeros({}), {}, {}},
      {"output overlapping input", both.slice(1, p + 1), both.slice(0, p), {}, {}},
  };
  for (const Bad& b : bad) {
    CAPTURE(p, b.what);
    std::string expected, got;
    try {
      lib.all_to_all(b.output, b.input, b.out_splits, b.in_splits).wait();
    } catch (const mgpu::Error& e) {
      expected = e.what();
    }
    try {
      pairwise_all_to_all(pg, b.output, b.input, b.out_splits, b.in_splits);
    } catch (const mgpu::Error& e) {
      got = e.what();
    }
    REQUIRE(!expected.empty());
    CHECK(got == expected);
  }
  CHECK(pg.send_peers.empty());
  CHECK(pg.recv_peers.empty());
}

TEST_CASE("pairwise all-to-all on CUDA tensors matches the CPU", "[04_collectives][gpu]") {
  // The mpi backend stages CUDA tensors through pinned memory; the own piece is a GPU copy.
  const Device dev = dist::rank_device(Device::Kind::cuda);
  CountingGroup pg(mgpu::testing::rank_gpu_group());
  const int p = pg.size(), r = pg.rank();
  for (const auto& [name, rows] : unequal_patterns(p)) {
    CAPTURE(p, r, name);
    Case c = make_case(p, r, rows, {3}, DType::f32, true);
    Tensor output = c.output.to(dev);
    pairwise_all_to_all(pg, output, c.input.to(dev), c.output_splits, c.input_splits);
    CHECK(same_bits(output.to(Device::cpu()), c.expected));
  }
}

