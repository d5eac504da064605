// Task 3: dispatch and combine. The counts go first (every rank must know how many rows it
// will receive before the rows can move), then the rows in one all-to-all with split sizes,
// then a local regroup so that each expert's rows are one contiguous block.
#include <numeric>

#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/parallel/moe/expert_exchange.h"

namespace mgpu::parallel::moe {

namespace {

// Rows per rank: the sum of each rank's L counts.
std::vector<std::int64_t> per_rank(const std::vector<std::int64_t>& counts, int P,
                                   std::int64_t L) {
  std::vector<std::int64_t> out(P, 0);
  for (int q = 0; q < P; ++q)
    for (std::int64_t l = 0; l < L; ++l) out[q] += counts[q * L + l];
  return out;
}

// Copies blocks between a source-major buffer (rank q's blocks for experts 0..L-1 in turn)
// and an expert-major one (expert l's blocks from ranks 0..P-1 in turn); `to_expert_major`
// says which way. counts[q·L + l] rows in block (q, l).
void regroup(const Tensor& from, Tensor& to, const std::vector<std::int64_t>& counts, int P,
             std::int64_t L, bool to_expert_major) {
  std::vector<std::int64_t> source_major(P * L + 1, 0), expert_major(P * L + 1, 0);
  for (int q = 0; q < P; ++q)
    for (std::int64_t l = 0; l < L; ++l) source_major[q * L + l + 1] = counts[q * L + l];
  std::partial_sum(source_major.begin(), source_major.end(), source_major.begin());
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
}

}  // namespace

ExpertExchange exchange_counts(const DispatchPlan& plan, dist::ProcessGroup& group) {
  const int P = group.size();
  MGPU_CHECK(P == plan.ep_size, "exchange_counts: the plan is for an EP group of ",
             plan.ep_size, " ranks, the group has ", P);
  ExpertExchange ex;
  ex.ep_size = P;
  ex.local_experts = plan.experts / P;
  ex.send_counts = plan.tokens_per_expert;
  // TODO(task3) BEGIN
  Tensor send = Tensor::from_vector(ex.send_counts, {static_cast<std::int64_t>(P) * ex.local_experts});
  Tensor recv = Tensor::empty(send.shape(), DType::i64);
  group.all_to_all(recv, send).wait();
  ex.recv_counts = recv.to_vector<std::int64_t>();
  // TODO(task3) END
  return ex;
}

Tensor to_experts(const Tensor& rows, const ExpertExchange& ex, dist::ProcessGroup& group) {
  const int P = group.size();
  const std::int64_t L = ex.local_experts;
  MGPU_CHECK(P == ex.ep_size && rows.ndim() >= 1, "to_experts: rows ", rows.str(),
             " over a group of ", P, " for an exchange of ", ex.ep_size);
  Tensor out;
  // TODO(task3) BEGIN
  const std::vector<std::int64_t> send = per_rank(ex.send_counts, P, L);
  const std::vector<std::int64_t> recv = per_rank(ex.recv_counts, P, L);
  Shape shape = rows.shape();
  shape[0] = std::accumulate(recv.begin(), recv.end(), std::int64_t{0});
  Tensor received = Tensor::empty(shape, rows.dtype(), rows.device());
  group.all_to_all(received, rows, recv, send).wait();
  out = Tensor::empty(shape, rows.dtype(), rows.device());
  regroup(received, out, ex.recv_counts, P, L, /*to_expert_major=*/true);
  // TODO(task3) END
  return out;
}

Tensor from_experts(const Tensor& rows, const ExpertExchange& ex, dist::ProcessGroup& group) {
  const int P = group.size();
  const std::int64_t L = ex.local_experts;
  MGPU_CHECK(P == ex.ep_size && rows.ndim() >= 1, "from_experts: rows ", rows.str(),
             " over a group of ", P, " for an exchange of ", ex.ep_size);
  Tensor out;
  // TODO(task3) BEGIN
  const std::vector<std::int64_t> send = per_rank(ex.recv_counts, P, L);
  const std::vector<std::int64_t> recv = per_rank(ex.send_counts, P, L);
  Tensor by_source = Tensor::empty(rows.shape(), rows.dtype(), rows.device());
  regroup(rows, by_source, ex.recv_counts, P, L, /*to_expert_major=*/false);
  Shape shape = rows.shape();
  shape[0] = std::accumulate(recv.begin(), recv.end(), std::int64_t{0});
  out = Tensor::empty(shape, rows.dtype(), rows.device());
  group.all_to_all(out, by_source, recv, send).wait();
  // TODO(task3) END
  return out;
}

}  // namespace mgpu::parallel::moe
