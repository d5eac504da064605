// Lesson 16, task 3 under mpirun (2, 3 and 4 ranks): the counts, and the rows to the
// experts' ranks and back. Every row is tagged with where it comes from (source rank,
// expert, index among that rank's rows for that expert), so each one is found exactly where
// the contract puts it; the counts are uneven, with zeros: a rank that sends no row to some
// rank, a rank that receives nothing, a rank that sends nothing, nothing at all. A group
// that passes every op on records each collective, its split sizes and the bytes it writes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "expect_error.h"
#include "forwarding_group.h"
#include "groups.h"
#include "mgpu/parallel/moe/expert_exchange.h"
#include "random_data.h"

using namespace mgpu;
using namespace mgpu::parallel::moe;
using mgpu::testing::all_ranks;
using mgpu::testing::ForwardingGroup;
using mgpu::testing::group;

namespace {

// One collective as the code under test issued it.
struct IssuedCollective {
  std::string op;                          // "all_to_all", "all_reduce", ...
  std::size_t bytes = 0;                   // of the tensor it writes
  DType dtype = DType::f32;                // of that tensor
  Device device;                           // of that tensor
  std::vector<std::int64_t> out_splits;    // all_to_all's split sizes (empty: equal pieces)
  std::vector<std::int64_t> in_splits;
};

// Passes every op on; records each collective and counts the messages sent.
class ExchangeLog : public ForwardingGroup {
 public:
  explicit ExchangeLog(dist::ProcessGroup& inner) : ForwardingGroup(inner) {}
  dist::Work all_to_all(const Tensor& out, const Tensor& in,
                        const std::vector<std::int64_t>& out_splits,
                        const std::vector<std::int64_t>& in_splits) override {
    splits_ = {out_splits, in_splits};
    return ForwardingGroup::all_to_all(out, in, out_splits, in_splits);
  }
  dist::Work send(const Tensor& t, int dst, int tag) override {
    ++messages;
    return ForwardingGroup::send(t, dst, tag);
  }
  dist::Work batch_isend_irecv(const std::vector<dist::P2POp>& ops) override {
    messages += static_cast<int>(ops.size());
    return ForwardingGroup::batch_isend_irecv(ops);
  }
  std::vector<IssuedCollective> calls;  // every collective so far, in order
  int messages = 0;                     // sends and receives so far

 protected:
  void on_collective(const std::string& op, const Tensor& written) override {
    IssuedCollective c;
    c.op = op;
    if (written.defined()) {
      c.bytes = written.nbytes();
      c.dtype = written.dtype();
      c.device = written.device();
    }
    if (op == "all_to_all") {
      c.out_splits = splits_.first;
      c.in_splits = splits_.second;
    }
    splits_ = {};
    calls.push_back(c);
  }

 private:
  std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> splits_;
};

// How many rows source rank s sends expert e (of P·L, rank q holding q·L ..).
enum class Counts { uneven_last_gets_none, first_sends_none, none_at_all, all_positive };
const Counts kAllCounts[] = {Counts::uneven_last_gets_none, Counts::first_sends_none,
                             Counts::none_at_all, Counts::all_positive};

const char* counts_name(Counts c) {
  switch (c) {
    case Counts::uneven_last_gets_none: return "uneven, zeros, the last rank receives nothing";
    case Counts::first_sends_none: return "rank 0 sends nothing";
    case Counts::none_at_all: return "no row at all";
    case Counts::all_positive: return "every count positive";
  }
  return "?";
}

std::int64_t rows_sent(Counts c, int s, std::int64_t e, int P, std::int64_t L) {
  switch (c) {
    case Counts::uneven_last_gets_none:
      return e / L == P - 1 ? 0 : (3 * s + 5 * e + 1) % 4;
    case Counts::first_sends_none: return s == 0 ? 0 : 1 + (s + 2 * e) % 3;
    case Counts::none_at_all: return 0;
    case Counts::all_positive: return 1 + (2 * s + e) % 3;
  }
  return 0;
}

// The exchange of rank r, written out here without exchange_counts.
ExpertExchange exchange_of(Counts c, int P, int r, std::int64_t L) {
  ExpertExchange ex;
  ex.ep_size = P;
  ex.local_experts = L;
  for (std::int64_t e = 0; e < P * L; ++e) ex.send_counts.push_back(rows_sent(c, r, e, P, L));
  for (int q = 0; q < P; ++q)
    for (std::int64_t l = 0; l < L; ++l) ex.recv_counts.push_back(rows_sent(c, q, r * L + l, P, L));
  return ex;
}

// Element i of the t-th row source rank s sends expert e: an integer, exact in f32.
double tag_value(int s, std::int64_t e, std::int64_t t, std::int64_t i) {
  return static_cast<double>(((s * 64 + e) * 64 + t) * 8 + i);
}

// Rows of `row_shape` (at most 8 elements) from a list of (s, e, t) in order.
struct RowId {
  int s;
  std::int64_t e, t;
};
Tensor tagged_rows(const std::vector<RowId>& ids, const Shape& row_shape, DType dtype) {
  const std::int64_t m = shape_numel(row_shape);
  std::vector<double> v;
  for (const RowId& id : ids)
    for (std::int64_t i = 0; i < m; ++i) v.push_back(tag_value(id.s, id.e, id.t, i));
  Shape shape{static_cast<std::int64_t>(ids.size())};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  return Tensor::from_vector(v, shape).to(dtype);
}

// Rank r's send buffer in the plan's order: its rows for expert 0, then expert 1, ...
std::vector<RowId> send_order(Counts c, int P, int r, std::int64_t L) {
  std::vector<RowId> ids;
  for (std::int64_t e = 0; e < P * L; ++e)
    for (std::int64_t t = 0; t < rows_sent(c, r, e, P, L); ++t) ids.push_back({r, e, t});
  return ids;
}

// What rank r holds after dispatch: for each local expert, every rank's rows in rank order.
std::vector<RowId> expert_major_order(Counts c, int P, int r, std::int64_t L) {
  std::vector<RowId> ids;
  for (std::int64_t l = 0; l < L; ++l)
    for (int q = 0; q < P; ++q)
      for (std::int64_t t = 0; t < rows_sent(c, q, r * L + l, P, L); ++t)
        ids.push_back({q, r * L + l, t});
  return ids;
}

// Rows rank r sends each rank (out = false) or receives from it (out = true).
std::vector<std::int64_t> rows_by_rank(Counts c, int P, int r, std::int64_t L, bool receiving) {
  std::vector<std::int64_t> n(P, 0);
  for (int q = 0; q < P; ++q)
    for (std::int64_t l = 0; l < L; ++l)
      n[q] += receiving ? rows_sent(c, q, r * L + l, P, L) : rows_sent(c, r, q * L + l, P, L);
  return n;
}

std::int64_t sum_of(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (std::int64_t x : v) s += x;
  return s;
}

// Exactly one collective: an all_to_all that writes `rows` rows of `row_bytes` each, with
// these split sizes; no message sent.
void check_one_all_to_all(const ExchangeLog& log, std::int64_t rows, std::size_t row_bytes,
                          const std::vector<std::int64_t>& out_splits,
                          const std::vector<std::int64_t>& in_splits) {
  REQUIRE(log.calls.size() == 1);
  const IssuedCollective& c = log.calls[0];
  CHECK(c.op == "all_to_all");
  CHECK(c.bytes == static_cast<std::size_t>(rows) * row_bytes);
  CHECK(c.out_splits == out_splits);
  CHECK(c.in_splits == in_splits);
  CHECK(log.messages == 0);
}

const Shape kRowShapes[] = {{3}, {2, 3}};
const DType kRowDTypes[] = {DType::f32, DType::f64};

// Bytes of one row.
std::size_t row_bytes_of(const Shape& row_shape, DType dtype) {
  return static_cast<std::size_t>(shape_numel(row_shape)) * dtype_size(dtype);
}

// An EP group of `ep` consecutive world ranks (this rank's), created on first use: every
// rank creates every group of that size, in the same order.
dist::ProcessGroup& exchange_ep_group(int ep) {
  static std::map<int, std::shared_ptr<dist::ProcessGroup>> groups;
  auto it = groups.find(ep);
  if (it != groups.end()) return *it->second;
  const int world = group().size();
  std::shared_ptr<dist::ProcessGroup> mine;
  for (int first = 0; first < world; first += ep) {
    std::vector<int> ranks;
    for (int w = first; w < first + ep; ++w) ranks.push_back(w);
    if (auto g = dist::new_group(ranks, "mpi", Device::cpu(),
                                 testing::quiet_options(testing::test_timeout_s())))
      mine = g;
  }
  return *groups.emplace(ep, mine).first->second;
}

// One case of the row-moving tests: the counts, L local experts, the rows' dtype and shape,
// and the exchange of those counts on this rank.
struct RowCase {
  Counts c;
  std::int64_t L;
  DType dtype;
  Shape row_shape;
  ExpertExchange ex;
};

// Runs body(k) for every case the row-moving tests cover: each kind of counts, 1 to 3 local
// experts, each row dtype and row shape, with the case in INFO.
template <typename Body>
void for_each_row_case(int P, int r, Body body) {
  for (Counts c : kAllCounts)
    for (std::int64_t L : {1, 2, 3})
      for (DType dtype : kRowDTypes)
        for (const Shape& row_shape : kRowShapes) {
          INFO(counts_name(c) << ", L = " << L << ", " << dtype_name(dtype) << ", rows "
                              << shape_str(row_shape));
          body(RowCase{c, L, dtype, row_shape, exchange_of(c, P, r, L)});
        }
}

struct MovedRows {
  Tensor got;   // what the exchange returned
  Tensor want;  // the tagged rows it should have returned
};

// Tagged rows of case k moved one way over a logged group: to_experts from the send order
// (to = true), else from_experts from the expert-major order. Checked: the result has the
// other order's shape, dtype and bits, and came in one all-to-all of exactly the rows that
// move.
MovedRows check_rows_moved(const RowCase& k, int P, int r, bool to) {
  const Tensor sent = tagged_rows(send_order(k.c, P, r, k.L), k.row_shape, k.dtype);
  const Tensor held = tagged_rows(expert_major_order(k.c, P, r, k.L), k.row_shape, k.dtype);
  ExchangeLog log(group());
  MovedRows m{to ? to_experts(sent, k.ex, log) : from_experts(held, k.ex, log), to ? held : sent};
  REQUIRE(m.got.defined());
  CHECK(m.got.shape() == m.want.shape());
  CHECK(m.got.dtype() == k.dtype);
  CHECK(testing::same_bits(m.got, m.want));
  const std::vector<std::int64_t> moved = rows_by_rank(k.c, P, r, k.L, to);
  check_one_all_to_all(log, sum_of(moved), row_bytes_of(k.row_shape, k.dtype), moved,
                       rows_by_rank(k.c, P, r, k.L, !to));
  return m;
}

}  // namespace

TEST_CASE("task3: exchange_counts tells each rank how many rows each rank sends to each of "
          "its experts, in one all-to-all of P·L i64 counts; a plan for another group size is "
          "refused before any traffic",
          "[16_moe][task3][points:2]") {
  const int P = group().size(), r = group().rank();
  for (Counts c : kAllCounts)
    for (std::int64_t L : {1, 2, 3}) {
      INFO(counts_name(c) << ", L = " << L);
      DispatchPlan plan;
      plan.experts = P * L;
      plan.ep_size = P;
      plan.send_counts = rows_by_rank(c, P, r, L, false);
      for (std::int64_t e = 0; e < P * L; ++e)
        plan.tokens_per_expert.push_back(rows_sent(c, r, e, P, L));
      ExchangeLog log(group());
      const ExpertExchange ex = exchange_counts(plan, log);
      const ExpertExchange want = exchange_of(c, P, r, L);
      CHECK(ex.ep_size == P);
      CHECK(ex.local_experts == L);
      CHECK(ex.send_counts == want.send_counts);
      CHECK(ex.recv_counts == want.recv_counts);
      REQUIRE(log.calls.size() == 1);
      CHECK(log.calls[0].op == "all_to_all");
      CHECK(log.calls[0].bytes == static_cast<std::size_t>(P * L) * sizeof(std::int64_t));
      CHECK(log.calls[0].dtype == DType::i64);
      CHECK(log.calls[0].device == Device::cpu());
      CHECK(log.messages == 0);
    }
  // A plan for P + 1 ranks over this group of P.
  DispatchPlan plan;
  plan.experts = 2 * (P + 1);
  plan.ep_size = P + 1;
  plan.tokens_per_expert.assign(plan.experts, 1);
  plan.send_counts.assign(P + 1, 2);
  ExchangeLog log(group());
  const std::string msg = testing::error_of([&] { exchange_counts(plan, log); });
  CHECK(testing::contains(msg, "exchange_counts"));
  CHECK(log.calls.empty());
  CHECK(all_ranks(true));
}

TEST_CASE("task3: to_experts puts every row where the contract says (expert-major, each "
          "rank's rows in the order sent), in one all-to-all of exactly the rows that move, "
          "for uneven counts with zeros, f32 and f64, rows [S, M] and [S, a, b]",
          "[16_moe][task3][points:3]") {
  const int P = group().size(), r = group().rank();
  for_each_row_case(P, r, [&](const RowCase& k) {
    CHECK(check_rows_moved(k, P, r, /*to=*/true).got.device() == Device::cpu());
  });
  CHECK(all_ranks(true));
}

TEST_CASE("task3: from_experts returns every expert's row to its place on the rank it came "
          "from, in one all-to-all, and from_experts(to_experts(x)) == x exactly",
          "[16_moe][task3][points:2]") {
  const int P = group().size(), r = group().rank();
  for_each_row_case(P, r, [&](const RowCase& k) {
    // From the expert-major rows written out here: the send buffer comes back.
    const MovedRows back = check_rows_moved(k, P, r, /*to=*/false);
    // The round trip, on values that are not tags.
    Shape shape = back.want.shape();
    const Tensor x = testing::uniform_tensor(shape, 1600 + 7 * r, k.dtype);
    const Tensor round = from_experts(to_experts(x, k.ex, group()), k.ex, group());
    CHECK(testing::same_bits(round, x));
  });
  CHECK(all_ranks(true));
}

TEST_CASE("task3: over EP groups of every size that divides the world, each group's rows stay "
          "in the group and come back exactly; an exchange for another group, or rows that "
          "are not the counts' sum, are refused before any traffic",
          "[16_moe][task3][points:1]") {
  const int world = group().size();
  for (int ep = 1; ep <= world; ++ep) {
    if (world % ep != 0) continue;
    dist::ProcessGroup& ep_group = exchange_ep_group(ep);
    const int P = ep_group.size(), r = ep_group.rank();
    REQUIRE(P == ep);
    for (Counts c : {Counts::uneven_last_gets_none, Counts::all_positive})
      for (std::int64_t L : {1, 2}) {
        INFO("EP " << ep << " of " << world << ", " << counts_name(c) << ", L = " << L);
        const ExpertExchange ex = exchange_of(c, P, r, L);
        const Tensor x = tagged_rows(send_order(c, P, r, L), {3}, DType::f64);
        ExchangeLog log(ep_group);
        const Tensor y = to_experts(x, ex, log);
        REQUIRE(y.defined());
        CHECK(testing::same_bits(y, tagged_rows(expert_major_order(c, P, r, L), {3}, DType::f64)));
        CHECK(testing::same_bits(from_experts(y, ex, log), x));
        CHECK(log.calls.size() == 2);
      }
    // An exchange for ep + 1 ranks, and rows one too many: refused, nothing issued.
    ExpertExchange other = exchange_of(Counts::all_positive, P + 1, 0, 2);
    ExchangeLog log(ep_group);
    const Tensor x = Tensor::zeros({sum_of(other.send_counts), 3}, DType::f64);
    CHECK(testing::contains(testing::error_of([&] { to_experts(x, other, log); }), "to_experts"));
    CHECK(testing::contains(testing::error_of([&] { from_experts(x, other, log); }),
                            "from_experts"));
    const ExpertExchange ex = exchange_of(Counts::all_positive, P, r, 2);
    const Tensor extra = Tensor::zeros({sum_of(ex.send_counts) + 1, 3}, DType::f64);
    CHECK(testing::contains(testing::error_of([&] { to_experts(extra, ex, log); }), "to_experts"));
    const Tensor extra_back = Tensor::zeros({sum_of(ex.recv_counts) + 1, 3}, DType::f64);
    CHECK(testing::contains(testing::error_of([&] { from_experts(extra_back, ex, log); }),
                            "from_experts"));
    CHECK(log.calls.empty());
  }
  CHECK(all_ranks(true));
}
