// Argument checks, the debug mode's cross-rank comparison, and options from the environment.
#include "checks.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "diagnose.h"
#include "mgpu/dist/runtime.h"
#include "mpi_util.h"
#include "progress_board.h"

namespace mgpu::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

double default_timeout_s() {
  const char* env = std::getenv("MGPU_DIST_TIMEOUT_S");
  if (!env || !*env) return 300.0;
  char* end = nullptr;
  double v = std::strtod(env, &end);
  MGPU_CHECK(end && *end == '\0' && v >= 0, "MGPU_DIST_TIMEOUT_S=", env,
             " is not a number of seconds (use e.g. 60; 0 turns the timeout off)");
  return v;
}

bool debug_from_env() {
  const char* env = std::getenv("MGPU_DIST_DEBUG");
  return env && *env && std::string(env) != "0";
}

namespace detail {

void check_tensor(const char* op, const Tensor& t, const char* what) {
  check_defined(op, t, what);
}

void check_reduce_op(const char* op, const Tensor& t, ReduceOp r) {
  MGPU_CHECK(r != ReduceOp::avg || is_floating(t.dtype()), op, "(avg): ", t.str(),
             " has an integer dtype; avg would truncate. Use sum and divide, or cast to f32");
}

void check_rank(const char* op, int r, int size, const char* what) {
  MGPU_CHECK(r >= 0 && r < size, op, ": ", what, " ", r, " is not a rank of this group (0..",
             size - 1, ")");
}

void check_split(const char* op, const Tensor& big, const char* big_name, const Tensor& small,
                 const char* small_name, int size) {
  check_tensor(op, big, big_name);
  check_tensor(op, small, small_name);
  check_same_dtype(op, big, small);
  MGPU_CHECK(big.numel() == small.numel() * size, op, ": ", big_name, " ", big.str(),
             " must hold world size (", size, ") x ", small_name, " ", small.str(), " = ",
             small.numel() * size, " elements");
}

namespace {

// Each rank's rows of `t` (equal pieces without `splits`), as element counts and offsets.
void pieces_of(const Tensor& t, const char* name, const std::vector<std::int64_t>& splits,
               const char* splits_name, int size, std::vector<std::int64_t>& counts,
               std::vector<std::int64_t>& offsets) {
  const std::int64_t rows = t.size(0), row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<std::int64_t> r = splits;
  if (r.empty()) {
    MGPU_CHECK(rows % size == 0, "all_to_all: Tensor's dim 0 does not divide equally across group size: ",
               name, " ", t.str(), " over ", size, " ranks; give ", splits_name, " for unequal pieces");
    r.assign(static_cast<std::size_t>(size), rows / size);
  }
  MGPU_CHECK(static_cast<int>(r.size()) == size, "all_to_all: Number of tensor splits not equal to group size: ",
             splits_name, " has ", r.size(), " entries for ", size, " ranks");
  std::int64_t sum = 0;
  for (std::int64_t n : r) {
    MGPU_CHECK(n >= 0, "all_to_all: ", splits_name, " holds ", n, "; a piece has 0 rows or more");
    sum += n;
  }
  MGPU_CHECK(sum == rows, "all_to_all: Split sizes doesn't match total dim 0 size: ", splits_name,
             " sum to ", sum, " but ", name, " ", t.str(), " has ", rows, " rows");
  std::int64_t at = 0;
  for (std::int64_t n : r) {
    counts.push_back(n * row);
    offsets.push_back(at);
    at += n * row;
  }
}

}  // namespace

}  // namespace detail

AllToAllPieces all_to_all_pieces(const Tensor& output, const Tensor& input,
                                 const std::vector<std::int64_t>& output_split_sizes,
                                 const std::vector<std::int64_t>& input_split_sizes, int size) {
  detail::check_tensor("all_to_all", output, "output");
  detail::check_tensor("all_to_all", input, "input");
  MGPU_CHECK(input.ndim() >= 1 && output.ndim() >= 1 && input.dtype() == output.dtype() &&
                 Shape(input.shape().begin() + 1, input.shape().end()) ==
                     Shape(output.shape().begin() + 1, output.shape().end()),
             "all_to_all: input ", input.str(), " and output ", output.str(),
             " must be rows of the same shape and dtype (cut along dimension 0)");
  MGPU_CHECK(input.device() == output.device(), "all_to_all: input ", input.str(), " and output ",
             output.str(), " must be on the same device");
  MGPU_CHECK(!detail::overlaps(input, output), "all_to_all: input ", input.str(), " overlaps output ",
             output.str(), "; give the result a tensor of its own");
  AllToAllPieces p;
  detail::pieces_of(input, "input", input_split_sizes, "input_split_sizes", size, p.send_counts, p.send_offsets);
  detail::pieces_of(output, "output", output_split_sizes, "output_split_sizes", size, p.recv_counts, p.recv_offsets);
  return p;
}

namespace detail {

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage(b) || a.numel() == 0 || b.numel() == 0) return false;
  return a.offset() < b.offset() + b.numel() && b.offset() < a.offset() + a.numel();
}

bool check_chunk_in_place(const char* op, const Tensor& chunk, const char* chunk_name,
                          const Tensor& whole, const char* whole_name, int rank) {
  const bool in_place = chunk.shares_storage(whole) &&
                        chunk.offset() == whole.offset() + rank * chunk.numel();
  MGPU_CHECK(in_place || !overlaps(chunk, whole), op, ": ", chunk_name, " ", chunk.str(),
             " overlaps ", whole_name, " ", whole.str(), " but is not its chunk ", rank);
  return in_place;
}

OpSignature make_signature(OpKind kind, std::int64_t seq, const Tensor* t, ReduceOp r, int root,
                           const std::string& backend, int group) {
  OpSignature s;
  s.group = group;
  s.kind = kind;
  s.seq = seq;
  s.reduce = r;
  s.root = root;
  s.backend = backend;
  if (t) {
    s.has_tensor = true;
    s.dtype = t->dtype();
    s.shape = t->shape();
    if (kind == OpKind::all_to_all) s.shape.erase(s.shape.begin());  // one row's shape
  }
  return s;
}

OpSignature p2p_signature(const std::vector<P2POp>& ops, std::int64_t seq,
                          const std::string& backend, int group) {
  if (ops.size() == 1) {
    const P2POp& o = ops.front();
    OpSignature s = make_signature(o.kind == P2POp::Kind::send ? OpKind::send : OpKind::recv, seq,
                                   &o.tensor, ReduceOp::sum, o.peer, backend, group);
    s.tag = o.tag;
    return s;
  }
  return batch_p2p_signature(ops, seq, backend, group);
}

OpSignature batch_p2p_signature(const std::vector<P2POp>& ops, std::int64_t seq,
                                const std::string& backend, int group) {
  OpSignature s = make_signature(OpKind::batch_p2p, seq, nullptr, ReduceOp::sum, -1, backend, group);
  for (const P2POp& o : ops)
    s.messages.push_back({o.kind == P2POp::Kind::send, o.peer, o.tag, o.tensor.dtype(), o.tensor.numel()});
  return s;
}

namespace {

constexpr int kMaxDims = 8;
constexpr int kFields = 8 + kMaxDims;
// A rank's contribution: the signature, then its issue counts on every tracked group.
constexpr int kRecord = kFields + kTrackedGroups;
using Record = std::array<std::int64_t, kRecord>;

// Fixed-size record so one MPI_Allgather carries every rank's signature.
Record encode(const OpSignature& s) {
  Record r{};
  r[0] = s.seq;
  r[1] = static_cast<std::int64_t>(s.kind);
  r[2] = static_cast<std::int64_t>(s.reduce);
  r[3] = static_cast<std::int64_t>(s.dtype);
  r[4] = s.root;
  r[5] = s.has_tensor;
  Shape shape = s.shape.size() <= kMaxDims ? s.shape : Shape{shape_numel(s.shape)};
  r[6] = static_cast<std::int64_t>(shape.size());
  r[7] = s.group;
  for (std::size_t i = 0; i < shape.size(); ++i) r[8 + i] = shape[i];
  std::copy(s.issued_before.begin(),
            s.issued_before.begin() + std::min<std::size_t>(s.issued_before.size(), kTrackedGroups),
            r.begin() + kFields);
  return r;
}

OpSignature decode(const std::int64_t* r, const std::string& backend) {
  OpSignature s;
  s.seq = r[0];
  s.kind = static_cast<OpKind>(r[1]);
  s.reduce = static_cast<ReduceOp>(r[2]);
  s.dtype = static_cast<DType>(r[3]);
  s.root = static_cast<int>(r[4]);
  s.has_tensor = r[5] != 0;
  s.shape.assign(r + 8, r + 8 + r[6]);
  s.backend = backend;
  return s;
}

// Waits for the allgather. While it waits, the board may show a member that issued a
// collective of another group first: then no rank can go on, so the job ends here with
// both ops named instead of at the timeout.
void wait_watching(MPI_Request& request, const OpSignature& sig, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const double grace_s = timeout_s > 0 ? std::min(2.0, timeout_s / 2) : 2.0;
  auto next_look = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(grace_s));
  for (int spins = 0;; ++spins) {
    int done = 0;
    MGPU_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (Clock::now() >= next_look) {
      std::string crossing = find_crossing(sig);
      if (!crossing.empty()) abort_job(crossing, 3);
      next_look = Clock::now() + std::chrono::milliseconds(500);
    }
    // Spin briefly, then sleep: oversubscribed ranks need the core.
    if (spins > 256) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Ranks of the group that share another group must have issued as many collectives there
// before this one: else their orders differ (rank a: H then G, rank b: G then H).
void check_order_across_groups(const OpSignature& sig, const std::vector<std::int64_t>& all,
                               int size) {
  const std::vector<int> members = group_members(sig.group);
  if (static_cast<int>(members.size()) != size) return;
  auto count = [&](int i, int h) { return all[static_cast<std::size_t>(i) * kRecord + kFields + h]; };
  for (int h = 0, groups = registered_groups(); h < groups; ++h) {  // not all 256 slots
    if (h == sig.group) continue;
    const std::vector<int> other = group_members(h);
    int first = -1;
    for (int i = 0; i < size; ++i) {
      if (std::find(other.begin(), other.end(), members[i]) == other.end()) continue;
      if (first < 0) {
        first = i;
      } else if (count(i, h) != count(first, h)) {
        MGPU_FAIL(kCrossGroupText, "before ", sig.describe(), " on ", group_label(sig.group),
                  ", rank ", members[first], " had issued ", count(first, h),
                  " collective(s) on ", group_label(h), " but rank ", members[i], " had issued ",
                  count(i, h), ". ", kCrossGroupRule, "; the op was not run on any rank");
      }
    }
  }
}

}  // namespace

void check_same_collective(MPI_Comm comm, const OpSignature& sig, double timeout_s) {
  int size = 1;
  MGPU_MPI_CHECK(MPI_Comm_size(comm, &size));
  Record mine = encode(sig);
  std::vector<std::int64_t> all(static_cast<std::size_t>(kRecord) * size);
  MPI_Request request = MPI_REQUEST_NULL;
  MGPU_MPI_CHECK(MPI_Iallgather(mine.data(), kRecord, MPI_INT64_T, all.data(), kRecord,
                                MPI_INT64_T, comm, &request));
  wait_watching(request, sig, timeout_s);
  const std::int64_t* first = all.data();
  for (int r = 1; r < size; ++r) {
    const std::int64_t* other = first + static_cast<std::size_t>(r) * kRecord;
    if (std::equal(first, first + kFields, other)) continue;
    MGPU_FAIL("mgpu::dist debug check: the ranks disagree on collective #", sig.seq,
              ": rank 0 issued ", decode(first, sig.backend).describe(), " but rank ", r,
              " issued ", decode(other, sig.backend).describe(),
              ". Every rank must issue the same collectives in the same order with the same "
              "dtypes and shapes; the op was not run on any rank");
  }
  check_order_across_groups(sig, all, size);
}

double resolve_timeout(const GroupOptions& o) { return o.timeout_s < 0 ? default_timeout_s() : o.timeout_s; }
bool resolve_debug(const GroupOptions& o) { return o.debug < 0 ? debug_from_env() : o.debug != 0; }

}  // namespace detail
}  // namespace mgpu::dist
