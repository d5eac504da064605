// Task 3: dispatch and combine. The counts go first (every rank must know how many rows it
// will receive before the rows can move), then the rows in one all-to-all with split sizes,
// and a local regroup so that each expert's rows are one contiguous block.
#include <numeric>

#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/parallel/moe/expert_exchange.h"

namespace mgpu::parallel::moe {

namespace {

// Rows per rank: the sum of each rank's L counts, counts[q·L .. q·L + L - 1] for rank q.
[[maybe_unused]]  // the exercise does not call it yet
std::vector<std::int64_t> rows_per_rank(const std::vector<std::int64_t>& counts, int P,
                                        std::int64_t L) {
  std::vector<std::int64_t> out(P, 0);
  for (int q = 0; q < P; ++q)
    for (std::int64_t l = 0; l < L; ++l) out[q] += counts[q * L + l];
  return out;
}

// The sum of `counts`.
std::int64_t total(const std::vector<std::int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
}

// Refuses, before any traffic, a group that is not the exchange's, counts that are not P·L
// long, and rows that are not sum(counts) rows (the counts they follow).
void check_exchange(const char* op, const Tensor& rows, const ExpertExchange& ex,
                    dist::ProcessGroup& group, const std::vector<std::int64_t>& counts,
                    const char* counts_name) {
  const int P = group.size();
  MGPU_CHECK(P == ex.ep_size, op, ": the exchange is for an EP group of ", ex.ep_size,
             " ranks, the group has ", P);
  const std::size_t PL = static_cast<std::size_t>(P) * static_cast<std::size_t>(ex.local_experts);
  MGPU_CHECK(ex.local_experts >= 1 && ex.send_counts.size() == PL && ex.recv_counts.size() == PL,
             op, ": the exchange's counts must be P·L = ", P, "·", ex.local_experts,
             " long (exchange_counts gives them), got ", ex.send_counts.size(), " and ",
             ex.recv_counts.size());
  MGPU_CHECK(rows.ndim() >= 1 && rows.size(0) == total(counts), op, ": rows ", rows.str(),
             " must hold sum(", counts_name, ") = ", total(counts), " rows");
}

// Copies the P·L blocks of rows between the two orders of a dispatch. Block (q, l), of
// counts[q·L + l] rows, holds what rank q sends local expert l. Source-major order, as the
// all-to-all delivers it: (0, 0), (0, 1), .., (0, L-1), (1, 0), ..; expert-major, as the
// experts run on it: (0, 0), (1, 0), .., (P-1, 0), (0, 1), ... to_expert_major: `from` is
// source-major and `to` expert-major; false: the other way. from and to are [sum(counts), ...].
[[maybe_unused]]  // the exercise does not call it yet
void regroup(const Tensor& from, Tensor& to, const std::vector<std::int64_t>& counts, int P,
             std::int64_t L, bool to_expert_major) {
  // What you have: from, to (rows along dimension 0, the same shape); counts [P·L]; P, L;
  // t.slice(begin, end) (rows [begin, end) of t, a view sharing its storage; a view of 0
  // rows is fine); copy_(dst, src) (dst a Tensor lvalue, the same shape as src);
  // std::partial_sum.
  // TODO(task3) BEGIN: chapter §5, task 3, the regroup: every block (q, l) of `from`, in its
  // order, is copied to its place in `to`, in the other order. Invariants: each row is
  // copied exactly once and values only move (exact); blocks of 0 rows are fine; no
  // collective. Stuck: tools/hint 16 3 (about 20 lines).
  std::vector<std::int64_t> source_major(P * L + 1, 0), expert_major(P * L, 0);
  // Where block (q, l) starts in source-major order: the rows of the blocks before it.
  for (int q = 0; q < P; ++q)
    for (std::int64_t l = 0; l < L; ++l) source_major[q * L + l + 1] = counts[q * L + l];
  std::partial_sum(source_major.begin(), source_major.end(), source_major.begin());
  // ... and in expert-major order: expert l's blocks follow experts 0..l-1's, rank q's
  // follows ranks 0..q-1's for the same expert.
  std::int64_t at = 0;
  for (std::int64_t l = 0; l < L; ++l)
    for (int q = 0; q < P; ++q) {
      expert_major[q * L + l] = at;
      at += counts[q * L + l];
    }
  for (int q = 0; q < P; ++q)
    for (std::int64_t l = 0; l < L; ++l) {
      const std::int64_t n = counts[q * L + l];
      if (n == 0) continue;
      const std::int64_t a = source_major[q * L + l], b = expert_major[q * L + l];
      const std::int64_t src = to_expert_major ? a : b, dst = to_expert_major ? b : a;
      Tensor piece = to.slice(dst, dst + n);
      copy_(piece, from.slice(src, src + n));
    }
  // TODO(task3) END
}

}  // namespace

ExpertExchange exchange_counts(const DispatchPlan& plan, dist::ProcessGroup& group) {
  const int P = group.size();
  MGPU_CHECK(P == plan.ep_size, "exchange_counts: the plan is for an EP group of ",
             plan.ep_size, " ranks, the group has ", P);
  MGPU_CHECK(plan.experts >= 1 && plan.experts % P == 0 &&
                 static_cast<std::int64_t>(plan.tokens_per_expert.size()) == plan.experts,
             "exchange_counts: a plan of E = ", plan.experts, " experts (",
             plan.tokens_per_expert.size(), " counts) does not split over ", P,
             " ranks; make_dispatch_plan gives a plan whose E the EP size divides");
  ExpertExchange ex;
  ex.ep_size = P;
  ex.local_experts = plan.experts / P;
  ex.send_counts = plan.tokens_per_expert;
  // What you have: ex.send_counts [P·L] (this rank's rows for local expert l of rank q at
  // q·L + l); P, L = ex.local_experts; Tensor::from_vector(values, shape) (a CPU tensor);
  // Tensor::empty(shape, dtype); t.to_vector<std::int64_t>(); group.all_to_all(output,
  // input) -> a dist::Work (wait() it): input cut along dimension 0 into P equal pieces,
  // piece q to rank q; output's piece q from rank q.
  // TODO(task3) BEGIN: chapter §5, task 3, the counts: ex.recv_counts [P·L] = at q·L + l,
  // the rows rank q sends this rank's local expert l (rank q's send_counts[r·L + l], r this
  // rank). Invariants: exactly one all_to_all, of an i64 tensor on the CPU; no send. Stuck:
  // tools/hint 16 3 (about 4 lines).
  Tensor send =
      Tensor::from_vector(ex.send_counts, {static_cast<std::int64_t>(P) * ex.local_experts});
  Tensor recv = Tensor::empty(send.shape(), DType::i64);
  group.all_to_all(recv, send).wait();
  ex.recv_counts = recv.to_vector<std::int64_t>();
  // TODO(task3) END
  return ex;
}

Tensor to_experts(const Tensor& rows, const ExpertExchange& ex, dist::ProcessGroup& group) {
  check_exchange("to_experts", rows, ex, group, ex.send_counts, "ex.send_counts");
  const int P = group.size();
  const std::int64_t L = ex.local_experts;
  Tensor out;
  // What you have: rows [S, ...] (in the plan's order: this rank's rows for rank 0's
  // experts, then rank 1's, ...); ex.send_counts, ex.recv_counts [P·L]; P, L;
  // rows_per_rank(counts, P, L) -> [P], total(counts) and regroup(from, to, counts, P, L,
  // to_expert_major) (above); rows.shape(), rows.dtype(), rows.device();
  // Tensor::empty(shape, dtype, device); group.all_to_all(output, input, output_splits,
  // input_splits) -> a dist::Work (wait() it): input_splits[q] rows of input to rank q,
  // output_splits[q] rows of output from rank q, in rank order.
  // TODO(task3) BEGIN: chapter §5, task 3, dispatch: out = this rank's experts' rows [R, ...], R =
  // sum(ex.recv_counts), expert-major: local expert 0's rows from rank 0, then from rank 1,
  // ..., then local expert 1's, ...; each rank's rows for an expert in the order it sent
  // them. Invariants: exactly one all_to_all, no send; rows keep their dtype, device and
  // row shape; exact (values only move); a rank that sends or receives no rows at all
  // takes part all the same. Stuck: tools/hint 16 3 (about 8 lines).
  const std::vector<std::int64_t> send = rows_per_rank(ex.send_counts, P, L);
  const std::vector<std::int64_t> recv = rows_per_rank(ex.recv_counts, P, L);
  Shape shape = rows.shape();
  shape[0] = total(recv);
  Tensor received = Tensor::empty(shape, rows.dtype(), rows.device());
  group.all_to_all(received, rows, recv, send).wait();
  out = Tensor::empty(shape, rows.dtype(), rows.device());
  regroup(received, out, ex.recv_counts, P, L, /*to_expert_major=*/true);
  // TODO(task3) END
  return out;
}

Tensor from_experts(const Tensor& rows, const ExpertExchange& ex, dist::ProcessGroup& group) {
  check_exchange("from_experts", rows, ex, group, ex.recv_counts, "ex.recv_counts");
  const int P = group.size();
  const std::int64_t L = ex.local_experts;
  Tensor out;
  // What you have: rows [R, ...] (expert-major, as to_experts returns them); ex.send_counts,
  // ex.recv_counts [P·L]; P, L; rows_per_rank, total, regroup (above); Tensor::empty(shape,
  // dtype, device); group.all_to_all(output, input, output_splits, input_splits) -> a dist::Work.
  // TODO(task3) BEGIN: chapter §5, task 3, combine: out = [S, ...], S = sum(ex.send_counts), in the
  // plan's order on the rank the rows came from: to_experts undone, from_experts(
  // to_experts(x)) == x exactly. Invariants: exactly one all_to_all, no send; rows keep
  // their dtype, device and row shape; a rank with no rows takes part all the same. Stuck:
  // tools/hint 16 3 (about 8 lines).
  const std::vector<std::int64_t> send = rows_per_rank(ex.recv_counts, P, L);
  const std::vector<std::int64_t> recv = rows_per_rank(ex.send_counts, P, L);
  Tensor by_source = Tensor::empty(rows.shape(), rows.dtype(), rows.device());
  regroup(rows, by_source, ex.recv_counts, P, L, /*to_expert_major=*/false);
  Shape shape = rows.shape();
  shape[0] = total(recv);
  out = Tensor::empty(shape, rows.dtype(), rows.device());
  group.all_to_all(out, by_source, recv, send).wait();
  // TODO(task3) END
  return out;
}

}  // namespace mgpu::parallel::moe
