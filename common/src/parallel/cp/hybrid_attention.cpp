// Two-dimensional context parallelism (hybrid_attention.h): lesson 14's Ulysses all-to-alls
// inside groups of U consecutive CP ranks, lesson 14's ring across the R such groups. This
// file only composes the lesson's functions; it adds the groups and one reordering of rows.
#include "mgpu/parallel/cp/hybrid_attention.h"

#include <algorithm>

#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/cp/ulysses.h"

namespace mgpu::parallel::cp {
namespace {

// The positions of the T/R rows a rank holds after Ulysses' all-to-all over its Ulysses
// group g: the group's U ranks' positions (of P), rank g·U's first (ulysses_positions'
// order within the group).
std::vector<std::int64_t> group_positions(std::int64_t T, int U, int R, int g, Split split) {
  std::vector<std::int64_t> pos;
  for (int j = 0; j < U; ++j) {
    const std::vector<std::int64_t> mine = sequence_positions(T, U * R, g * U + j, split);
    pos.insert(pos.end(), mine.begin(), mine.end());
  }
  return pos;
}

// from[i]: where in `have` the i-th position of `want` is. The two hold the same positions
// (for the plain and the zigzag split the U ranks of Ulysses group g together hold exactly
// ring rank g's positions of R); only their order differs under the zigzag split.
std::vector<std::int64_t> row_order(const std::vector<std::int64_t>& have,
                                    const std::vector<std::int64_t>& want) {
  MGPU_CHECK(have.size() == want.size(), "hybrid attention: ", have.size(), " rows, ring wants ",
             want.size());
  std::vector<std::int64_t> from;
  from.reserve(want.size());
  for (std::int64_t p : want) {
    const auto it = std::find(have.begin(), have.end(), p);
    MGPU_CHECK(it != have.end(), "hybrid attention: position ", p,
               " of the ring's rank is not in its Ulysses group");
    from.push_back(it - have.begin());
  }
  return from;
}

// x [BH, L, D] with its rows along dimension 1 reordered: row i of the result is row from[i]
// of x. Values only move (runs of consecutive rows are copied as one).
Tensor reorder_rows(const Tensor& x, const std::vector<std::int64_t>& from) {
  bool identity = true;
  for (std::size_t i = 0; i < from.size(); ++i) identity = identity && from[i] == static_cast<std::int64_t>(i);
  if (identity) return x;
  const Tensor t = permute(x, {1, 0, 2});  // [L, BH, D]: a row is one position of every head
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  for (std::size_t i = 0; i < from.size();) {
    std::size_t n = 1;
    while (i + n < from.size() && from[i + n] == from[i] + static_cast<std::int64_t>(n)) ++n;
    Tensor dst = out.slice(static_cast<std::int64_t>(i), static_cast<std::int64_t>(i + n));
    copy_(dst, t.slice(from[i], from[i] + static_cast<std::int64_t>(n)));
    i += n;
  }
  return permute(out, {1, 0, 2});
}

// The inverse of an order: inv[from[i]] = i.
std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& from) {
  std::vector<std::int64_t> inv(from.size());
  for (std::size_t i = 0; i < from.size(); ++i) inv[static_cast<std::size_t>(from[i])] = static_cast<std::int64_t>(i);
  return inv;
}

// The order taking the rows after the all-to-all to the ring's order, for T positions.
std::vector<std::int64_t> to_ring_order(std::int64_t T, Split split, const HybridGroups& g) {
  return row_order(group_positions(T, g.U, g.R, g.ring->rank(), split),
                   sequence_positions(T, g.R, g.ring->rank(), split));
}

void check_groups(const char* op, const HybridGroups& g) {
  MGPU_CHECK(g.ulysses && g.ring, op, ": this rank has no hybrid groups");
  MGPU_CHECK(g.ulysses->size() == g.U && g.ring->size() == g.R, op, ": groups of ",
             g.ulysses->size(), " and ", g.ring->size(), " ranks for U = ", g.U, ", R = ", g.R);
}

}  // namespace

int default_ulysses_size(int P, std::int64_t heads) {
  for (int U = P - 1; U > 1; --U)
    if (P % U == 0 && heads % U == 0) return U;
  return 1;
}

HybridGroups new_hybrid_groups(const std::vector<std::vector<int>>& cp_groups, int U,
                               const std::string& backend, const Device& device,
                               const dist::GroupOptions& options) {
  MGPU_CHECK(!cp_groups.empty(), "new_hybrid_groups: no CP group");
  const int P = static_cast<int>(cp_groups.front().size());
  MGPU_CHECK(U >= 1 && P % U == 0, "hybrid attention: the Ulysses size U = ", U,
             " does not divide the CP size P = ", P, "; choose U among the divisors of P");
  HybridGroups out;
  out.U = U;
  out.R = P / U;
  // Every rank creates every group, in one order: each CP group's Ulysses groups, then its
  // ring groups (new_group is collective over the world).
  for (const std::vector<int>& cp : cp_groups) {
    MGPU_CHECK(static_cast<int>(cp.size()) == P, "new_hybrid_groups: CP groups of ", P, " and ",
               cp.size(), " ranks");
    for (int g = 0; g < out.R; ++g) {
      std::vector<int> ranks(cp.begin() + g * U, cp.begin() + (g + 1) * U);
      if (auto grp = dist::new_group(ranks, backend, device, options)) out.ulysses = grp;
    }
    for (int j = 0; j < U; ++j) {
      std::vector<int> ranks;
      for (int g = 0; g < out.R; ++g) ranks.push_back(cp[static_cast<std::size_t>(g * U + j)]);
      if (auto grp = dist::new_group(ranks, backend, device, options)) out.ring = grp;
    }
  }
  return out;
}

HybridForward hybrid_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       std::int64_t heads, Split split, bool causal,
                                       const HybridGroups& groups) {
  check_cp_operands("hybrid_attention_forward", q, k, v);
  check_groups("hybrid_attention_forward", groups);
  heads_per_rank(heads, groups.U);  // refused before any traffic
  const std::int64_t T = q.size(1) * groups.U * groups.R;
  const std::vector<std::int64_t> to_ring = to_ring_order(T, split, groups);
  HybridForward f;
  // 1-2) Ulysses inside: the group's positions of H/U heads, in the ring's order.
  f.q = reorder_rows(sequence_to_heads(q, heads, *groups.ulysses), to_ring);
  f.k = reorder_rows(sequence_to_heads(k, heads, *groups.ulysses), to_ring);
  f.v = reorder_rows(sequence_to_heads(v, heads, *groups.ulysses), to_ring);
  // 3) The ring across the groups on those heads.
  f.ring = ring_attention_forward(f.q, f.k, f.v, split, causal, *groups.ring);
  f.work = f.ring.work;
  // 4) The output back to this rank's positions of every head.
  f.out = heads_to_sequence(reorder_rows(f.ring.out, inverse(to_ring)), heads, *groups.ulysses);
  f.ring.out = Tensor();
  return f;
}

nn::AttentionGrads hybrid_attention_backward(const Tensor& dout, const HybridForward& fwd,
                                             std::int64_t heads, Split split, bool causal,
                                             const HybridGroups& groups) {
  check_cp_operands("hybrid_attention_backward", fwd.q, fwd.k, fwd.v);
  check_groups("hybrid_attention_backward", groups);
  const std::int64_t T = fwd.q.size(1) * groups.R;
  const std::vector<std::int64_t> to_ring = to_ring_order(T, split, groups);
  const std::vector<std::int64_t> back = inverse(to_ring);
  const Tensor dout_h = reorder_rows(sequence_to_heads(dout, heads, *groups.ulysses), to_ring);
  const nn::AttentionGrads r =
      ring_attention_backward(dout_h, fwd.q, fwd.k, fwd.v, fwd.ring, split, causal, *groups.ring);
  nn::AttentionGrads g;
  g.dq = heads_to_sequence(reorder_rows(r.dq, back), heads, *groups.ulysses);
  g.dk = heads_to_sequence(reorder_rows(r.dk, back), heads, *groups.ulysses);
  g.dv = heads_to_sequence(reorder_rows(r.dv, back), heads, *groups.ulysses);
  return g;
}

}  // namespace mgpu::parallel::cp
