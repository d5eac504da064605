// Shared by lesson 14's graded tests: full attention in one process (the reference), the
// rows of a rank, and a group that records each message the ring sends and each collective
// (Ulysses' all-to-alls).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "error_measures.h"
#include "forwarding_group.h"
#include "groups.h"
#include "mgpu/copy.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/attention.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/cp/ring_attention.h"
#include "mgpu/parallel/cp/ulysses.h"
#include "random_data.h"

namespace cp_test {

using namespace mgpu;
using namespace mgpu::testing;
namespace cp = mgpu::parallel::cp;  // context parallelism: lesson 14 writes its functions

/// f64 on both sides: only the order of the sums differs.
constexpr double kTol = 1e-12;
/// BH = 3 (batch x heads), T = 24 positions (2P divides it for P = 1..4), D = 4.
constexpr std::int64_t kBH = 3, kT = 24, kD = 4;

/// Full attention over the whole sequence in one process, and its gradients.
struct Full {
  Tensor y;                  ///< [BH, T, D]
  nn::AttentionGrads grads;  ///< dq, dk, dv [BH, T, D]
};

/// y = softmax(q kᵀ/√D) v, causal or not, and its gradients for dL/dy = dy (the causal
/// one is lesson 12's nn::causal_attention).
inline Full full_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dy,
                           bool causal) {
  Full f;
  Tensor p;
  if (causal) {
    f.y = nn::causal_attention(q, k, v, &p);
    f.grads = nn::causal_attention_backward(dy, q, k, v, p);
    return f;
  }
  const double s = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  p = matmul_batched(q, k, false, true);
  scale_(p, s);
  p = softmax(p, false);
  f.y = matmul_batched(p, v);
  f.grads.dv = matmul_batched(p, dy, true, false);
  Tensor ds = softmax_backward(matmul_batched(dy, v, false, true), p);
  scale_(ds, s);
  f.grads.dq = matmul_batched(ds, k);
  f.grads.dk = matmul_batched(ds, q, true, false);
  return f;
}

/// Rows `pos` of x [BH, T, D]: [BH, pos.size(), D], cut here without the library.
inline Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& pos) {
  const std::int64_t BH = x.size(0), T = x.size(1), D = x.size(2), n = static_cast<std::int64_t>(pos.size());
  Tensor out = Tensor::empty({BH, n, D}, x.dtype());
  for (std::int64_t h = 0; h < BH; ++h)
    for (std::int64_t i = 0; i < n; ++i) {
      Tensor dst = out.view((h * n + i) * D, {D});
      copy_(dst, x.view((h * T + pos[i]) * D, {D}));
    }
  return out;
}

/// Rank r's positions, written out here without the library: [r·T/P, (r+1)·T/P), or chunks
/// r and 2P-1-r of 2P.
inline std::vector<std::int64_t> expected_positions(std::int64_t T, int P, int r, cp::Split split) {
  std::vector<std::int64_t> pos;
  const std::int64_t n = split == cp::Split::zigzag ? 2 * P : P, c = T / n;
  for (std::int64_t t = r * c; t < (r + 1) * c; ++t) pos.push_back(t);
  if (split == cp::Split::zigzag)
    for (std::int64_t t = (2 * P - 1 - r) * c; t < (2 * P - r) * c; ++t) pos.push_back(t);
  return pos;
}

/// One message a rank sent: destination, tag, bytes.
struct Sent {
  int peer = 0;       ///< destination rank
  int tag = 0;        ///< its tag
  std::size_t bytes = 0;  ///< its size
};

/// A group that passes everything on and records each message sent (by send() or within
/// batch_isend_irecv) and each collective.
class SendLog : public ForwardingGroup {
 public:
  /// Records what `inner` is asked to send through this group.
  explicit SendLog(dist::ProcessGroup& inner) : ForwardingGroup(inner) {}
  /// Records the send (a batch of one send, with no receive), then passes it on.
  dist::Work send(const Tensor& t, int dst, int tag) override {
    sent.push_back({dst, tag, t.nbytes()});
    batches.push_back({1, 0});
    return ForwardingGroup::send(t, dst, tag);
  }
  /// Records each send of the batch and the batch's shape, then passes the batch on.
  dist::Work batch_isend_irecv(const std::vector<dist::P2POp>& ops) override {
    Batch b;
    for (const dist::P2POp& o : ops) {
      if (o.kind == dist::P2POp::Kind::send) {
        sent.push_back({o.peer, o.tag, o.tensor.nbytes()});
        ++b.sends;
      } else {
        ++b.receives;
      }
    }
    batches.push_back(b);
    return ForwardingGroup::batch_isend_irecv(ops);
  }
  /// How many sends and receives one batch (or one plain send) held.
  struct Batch {
    int sends = 0;
    int receives = 0;
  };
  std::vector<Sent> sent;      ///< every message sent so far, in order
  std::vector<Batch> batches;  ///< every batch_isend_irecv (and send) so far, in order
  int collectives = 0;         ///< collectives issued so far
  /// Every collective so far, in order: its name and the bytes of the tensor it writes.
  std::vector<std::pair<std::string, std::size_t>> collective_log;

 protected:
  void on_collective(const std::string& op, const Tensor& written) override {
    ++collectives;
    collective_log.emplace_back(op, written.defined() ? written.nbytes() : 0);
  }
};

/// The sends of `log` with tag `tag`.
inline std::vector<Sent> with_tag(const std::vector<Sent>& log, int tag) {
  std::vector<Sent> out;
  for (const Sent& s : log)
    if (s.tag == tag) out.push_back(s);
  return out;
}

/// q, k, v, dy of the whole sequence [BH, T, D], f64, the same on every rank.
inline std::tuple<Tensor, Tensor, Tensor, Tensor> whole_inputs(std::int64_t T = kT) {
  return {random_tensor({kBH, T, kD}, 11), random_tensor({kBH, T, kD}, 12),
          random_tensor({kBH, T, kD}, 13), random_tensor({kBH, T, kD}, 14)};
}

/// What one CP rank holds of a whole sequence, and full attention's result to hold it to.
struct RankCase {
  Tensor whole_q;                 ///< the whole sequence's queries
  Full full;                      ///< full attention over the whole sequence
  Tensor q, k, v, dy;             ///< this rank's rows of the whole inputs
  std::vector<std::int64_t> pos;  ///< their positions
};

/// Rank r of P's case under `split`, from the whole inputs (whole_inputs(), ...).
inline RankCase rank_case_of(const std::tuple<Tensor, Tensor, Tensor, Tensor>& whole, bool causal,
                             cp::Split split, int P, int r) {
  const auto& [q, k, v, dy] = whole;
  RankCase c;
  c.whole_q = q;
  c.full = full_attention(q, k, v, dy, causal);
  c.pos = expected_positions(q.size(1), P, r, split);
  c.q = take_rows(q, c.pos);
  c.k = take_rows(k, c.pos);
  c.v = take_rows(v, c.pos);
  c.dy = take_rows(dy, c.pos);
  return c;
}

/// Exactly n all-to-alls on `log`, each writing `bytes`, and nothing else: no other
/// collective, no send.
inline void check_all_to_alls(const SendLog& log, std::size_t n, std::size_t bytes) {
  CHECK(log.collective_log.size() == n);
  for (const auto& [op, written] : log.collective_log) {
    CHECK(op == "all_to_all");
    CHECK(written == bytes);
  }
  CHECK(log.sent.empty());
}

// ---- Ulysses (task 5) ---------------------------------------------------------------------------

/// Ulysses' shapes: B = 2 sequences of H = 12 heads (P = 2, 3, 4 divide it), T = 24, D = 4;
/// the rows of [B·H, T, D] are b·H + h.
constexpr std::int64_t kUB = 2, kUH = 12;

/// q, k, v, dy of the whole sequence [B·H, T, D], f64, the same on every rank.
inline std::tuple<Tensor, Tensor, Tensor, Tensor> ulysses_whole_inputs() {
  const std::int64_t BH = kUB * kUH;
  return {random_tensor({BH, kT, kD}, 21), random_tensor({BH, kT, kD}, 22),
          random_tensor({BH, kT, kD}, 23), random_tensor({BH, kT, kD}, 24)};
}

/// What rank r holds after sequence_to_heads, written out here without the library: rows
/// b·H + r·H/P + i of `whole` [B·H, T, D] (i < H/P) in the order b, i, their positions rank
/// 0's, then rank 1's, ... -> [B·H/P, T, D].
inline Tensor expected_head_rows(const Tensor& whole, std::int64_t B, std::int64_t H, int P, int r,
                                 cp::Split split) {
  const std::int64_t T = whole.size(1), D = whole.size(2), hp = H / P;
  std::vector<std::int64_t> order;
  for (int j = 0; j < P; ++j)
    for (std::int64_t t : expected_positions(T, P, j, split)) order.push_back(t);
  Tensor out = Tensor::empty({B * hp, T, D}, whole.dtype());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < hp; ++i)
      for (std::int64_t t = 0; t < T; ++t) {
        Tensor dst = out.view(((b * hp + i) * T + t) * D, {D});
        copy_(dst, whole.view(((b * H + r * hp + i) * T + order[t]) * D, {D}));
      }
  return out;
}

}  // namespace cp_test
