// Lesson 16, task 5 under mpirun (2, 3 and 4 ranks): the EP × DP gradient groups. First
// the groups against their definition for every world of 1 to 8 ranks. Then a tiny f64 MoE
// layer run one step on every rank, each rank on its own tokens: its experts split over EP
// groups of consecutive ranks (routing, dispatch plan and exchange by the lesson's
// functions), its gradients reduced as expert_grad_groups says, over groups made of the
// ranks it names, and compared with one process's gradients of the mean loss over all
// ranks' tokens. And the trap: the expert gradients scaled by 1 / (the number of ranks that
// hold the expert) instead come out ep times too large, exactly 2× at 2 ranks with EP 2.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "expect_error.h"
#include "groups.h"
#include "mgpu/parallel/moe/dispatch_plan.h"
#include "mgpu/parallel/moe/expert_exchange.h"
#include "mgpu/parallel/moe/expert_grads.h"
#include "mgpu/parallel/moe/routing.h"
#include "random_data.h"

using namespace mgpu;
using namespace mgpu::parallel::moe;
using mgpu::testing::all_ranks;
using mgpu::testing::group;

namespace {

// ---- the definition -------------------------------------------------------------------------

// World rank `rank`'s reductions, written out here: dense weights over every rank, an
// expert's over the ranks at the same place of their EP groups (rank mod ep), both sums
// divided by the world (each rank's loss is the mean of its own N tokens, and the mean over
// all ranks' tokens is the mean of the ranks' losses).
ExpertGradGroups defined_grad_groups(int world, int ep, int rank) {
  ExpertGradGroups g;
  for (int w = 0; w < world; ++w) g.dense.ranks.push_back(w);
  for (int w = rank % ep; w < world; w += ep) g.expert.ranks.push_back(w);
  g.dense.scale = 1.0 / world;
  g.expert.scale = 1.0 / world;
  return g;
}

// ---- a tiny MoE layer in f64 ------------------------------------------------------------------
//
// u [N, In] -> x = u·W_in [N, D] -> probs = softmax(x·W_r) [N, E] -> each token's k choices
// (route_top_k), its weights the chosen probs renormalised -> out_n = Σ_j w_nj · x_n·W_e(n,j)
// -> a rank's loss = (1/N) Σ_n <out_n, target_n>. W_in and W_r are dense (every rank holds
// them), each W_e [D, D] lives on the EP rank of its expert.

constexpr std::int64_t kMoeTokens = 8, kMoeIn = 3, kMoeWidth = 4, kMoeChoices = 2;

using Mat = std::vector<double>;  // row-major

// The layer's weights for E experts, the same on every rank (the library's generator).
struct MoeWeights {
  std::int64_t experts = 0;
  Mat w_in;                   // [In, D]
  Mat w_router;               // [D, E]
  std::vector<Mat> w_expert;  // E of [D, D]
};

// Gradients of the weights (w_expert: of the experts asked for).
struct MoeGrads {
  Mat w_in, w_router;
  std::vector<Mat> w_expert;
  double loss = 0;
};

Mat seeded(std::int64_t n, std::uint64_t seed) {
  return testing::uniform_tensor({n}, seed).to_vector<double>();
}

MoeWeights moe_weights(std::int64_t experts) {
  MoeWeights m;
  m.experts = experts;
  m.w_in = seeded(kMoeIn * kMoeWidth, 1601);
  m.w_router = seeded(kMoeWidth * experts, 1602);
  for (std::int64_t e = 0; e < experts; ++e)
    m.w_expert.push_back(seeded(kMoeWidth * kMoeWidth, 1610 + static_cast<std::uint64_t>(e)));
  return m;
}

// World rank w's tokens [N, In] and targets [N, D].
Mat moe_tokens(int w) { return seeded(kMoeTokens * kMoeIn, 1700 + static_cast<std::uint64_t>(w)); }
Mat moe_targets(int w) {
  return seeded(kMoeTokens * kMoeWidth, 1800 + static_cast<std::uint64_t>(w));
}

// Row n of an [rows, cols] matrix times b [cols, m], added to out (m wide).
void row_times(const double* row, const Mat& b, std::int64_t cols, std::int64_t m, double* out) {
  for (std::int64_t a = 0; a < cols; ++a)
    for (std::int64_t c = 0; c < m; ++c) out[c] += row[a] * b[a * m + c];
}

// Row times bᵀ (b [m, cols]), added to out (m wide).
void row_times_t(const double* row, const Mat& b, std::int64_t cols, std::int64_t m, double* out) {
  for (std::int64_t c = 0; c < m; ++c)
    for (std::int64_t a = 0; a < cols; ++a) out[c] += row[a] * b[c * cols + a];
}

// g [rows_a, rows_b] += aᵀ·b for one row a (rows_a wide) and one row b (rows_b wide).
void add_outer(const double* a, const double* b, std::int64_t na, std::int64_t nb, Mat& g) {
  for (std::int64_t i = 0; i < na; ++i)
    for (std::int64_t j = 0; j < nb; ++j) g[i * nb + j] += a[i] * b[j];
}

// The dense part of n tokens: x, the router's probs, its choices and their weights.
struct MoeDense {
  std::int64_t n = 0;
  Mat u, x, probs;  // [n, In], [n, D], [n, E]
  Routing routing;  // k choices of each token
  Mat weight;       // [n·k]
};

MoeDense moe_dense_forward(const Mat& u, const MoeWeights& m) {
  MoeDense d;
  const std::int64_t E = m.experts;
  d.n = static_cast<std::int64_t>(u.size()) / kMoeIn;
  d.u = u;
  d.x.assign(d.n * kMoeWidth, 0.0);
  d.probs.assign(d.n * E, 0.0);
  for (std::int64_t t = 0; t < d.n; ++t) {
    row_times(&u[t * kMoeIn], m.w_in, kMoeIn, kMoeWidth, &d.x[t * kMoeWidth]);
    row_times(&d.x[t * kMoeWidth], m.w_router, kMoeWidth, E, &d.probs[t * E]);
    double* p = &d.probs[t * E];
    const double top = *std::max_element(p, p + E);
    double sum = 0;
    for (std::int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(p[e] - top));
    for (std::int64_t e = 0; e < E; ++e) p[e] /= sum;
  }
  d.routing = route_top_k(Tensor::from_vector(d.probs, {d.n, E}), kMoeChoices);
  d.weight.assign(d.n * kMoeChoices, 0.0);
  for (std::int64_t t = 0; t < d.n; ++t) {
    double s = 0;
    for (std::int64_t j = 0; j < kMoeChoices; ++j)
      s += d.probs[t * E + d.routing.expert[t * kMoeChoices + j]];
    for (std::int64_t j = 0; j < kMoeChoices; ++j)
      d.weight[t * kMoeChoices + j] = d.probs[t * E + d.routing.expert[t * kMoeChoices + j]] / s;
  }
  return d;
}

// The dense part's backward: from dL/d(weight) of each choice and dL/dx through the experts,
// the gradients of W_in and W_r (added to g).
void moe_dense_backward(const MoeDense& d, const Mat& d_weight, Mat dx, const MoeWeights& m,
                        MoeGrads& g) {
  const std::int64_t E = m.experts, k = kMoeChoices;
  for (std::int64_t t = 0; t < d.n; ++t) {
    const double* p = &d.probs[t * E];
    double s = 0, dot = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      s += p[d.routing.expert[t * k + j]];
      dot += d_weight[t * k + j] * d.weight[t * k + j];
    }
    // w_j = p_e(j) / s: dL/dp_e(j) = (dL/dw_j - Σ_j' dL/dw_j' w_j') / s.
    Mat dp(E, 0.0);
    for (std::int64_t j = 0; j < k; ++j)
      dp[d.routing.expert[t * k + j]] += (d_weight[t * k + j] - dot) / s;
    double pdp = 0;
    for (std::int64_t e = 0; e < E; ++e) pdp += p[e] * dp[e];
    Mat dlogit(E, 0.0);
    for (std::int64_t e = 0; e < E; ++e) dlogit[e] = p[e] * (dp[e] - pdp);
    add_outer(&d.x[t * kMoeWidth], dlogit.data(), kMoeWidth, E, g.w_router);
    row_times_t(dlogit.data(), m.w_router, E, kMoeWidth, &dx[t * kMoeWidth]);
    add_outer(&d.u[t * kMoeIn], &dx[t * kMoeWidth], kMoeIn, kMoeWidth, g.w_in);
  }
}

MoeGrads zero_grads(const MoeWeights& m, std::int64_t experts_held) {
  MoeGrads g;
  g.w_in.assign(kMoeIn * kMoeWidth, 0.0);
  g.w_router.assign(kMoeWidth * m.experts, 0.0);
  g.w_expert.assign(experts_held, Mat(kMoeWidth * kMoeWidth, 0.0));
  return g;
}

// One process: every rank's tokens at once, each choice straight to its expert; the loss is
// the mean over all world·N tokens.
MoeGrads one_process_grads(const MoeWeights& m, int world) {
  const std::int64_t D = kMoeWidth, k = kMoeChoices;
  Mat u, target;
  for (int w = 0; w < world; ++w) {
    const Mat uw = moe_tokens(w), tw = moe_targets(w);
    u.insert(u.end(), uw.begin(), uw.end());
    target.insert(target.end(), tw.begin(), tw.end());
  }
  const MoeDense d = moe_dense_forward(u, m);
  const double inv = 1.0 / static_cast<double>(d.n);
  MoeGrads g = zero_grads(m, m.experts);
  Mat dx(d.n * D, 0.0), d_weight(d.n * k, 0.0);
  for (std::int64_t t = 0; t < d.n; ++t)
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = d.routing.expert[t * k + j];
      Mat y(D, 0.0), dy(D, 0.0);
      row_times(&d.x[t * D], m.w_expert[e], D, D, y.data());
      for (std::int64_t c = 0; c < D; ++c) {
        const double dout = target[t * D + c] * inv;
        g.loss += d.weight[t * k + j] * y[c] * target[t * D + c] * inv;
        d_weight[t * k + j] += dout * y[c];
        dy[c] = d.weight[t * k + j] * dout;
      }
      add_outer(&d.x[t * D], dy.data(), D, D, g.w_expert[e]);
      row_times_t(dy.data(), m.w_expert[e], D, D, &dx[t * D]);
    }
  moe_dense_backward(d, d_weight, dx, m, g);
  return g;
}

// n rows of width D as a tensor [n, D], and back.
Tensor rows_tensor(const Mat& v) {
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size()) / kMoeWidth, kMoeWidth});
}

// World rank `world_rank`'s gradients before any reduction, its experts split over
// `ep_group` (EP rank p holds experts p·L ..): routing, plan, exchange and the two
// all-to-alls each way by the lesson's functions. w_expert: its L experts'.
MoeGrads ep_rank_grads(const MoeWeights& m, int world_rank, dist::ProcessGroup& ep_group) {
  const std::int64_t D = kMoeWidth, k = kMoeChoices;
  const int P = ep_group.size(), p = ep_group.rank();
  const std::int64_t L = m.experts / P;
  const Mat target = moe_targets(world_rank);
  const MoeDense d = moe_dense_forward(moe_tokens(world_rank), m);
  const double inv = 1.0 / static_cast<double>(d.n);
  const DispatchPlan plan = make_dispatch_plan(d.routing, capacity_slots(d.routing, -1), P);
  const ExpertExchange ex = exchange_counts(plan, ep_group);
  const std::int64_t S = static_cast<std::int64_t>(plan.order.size());
  REQUIRE(S == d.n * k);  // dropless
  // Dispatch: row i of the send buffer is token order[i] / k's x.
  Mat send(S * D);
  for (std::int64_t i = 0; i < S; ++i)
    std::copy_n(&d.x[(plan.order[i] / k) * D], D, &send[i * D]);
  const Mat held = to_experts(rows_tensor(send), ex, ep_group).to_vector<double>();
  const std::int64_t R = static_cast<std::int64_t>(held.size()) / D;
  // Each local expert's block: rows of every rank, contiguous.
  std::vector<std::int64_t> block_begin(L + 1, 0);
  for (std::int64_t l = 0; l < L; ++l) {
    block_begin[l + 1] = block_begin[l];
    for (int q = 0; q < P; ++q) block_begin[l + 1] += ex.recv_counts[q * L + l];
  }
  REQUIRE(block_begin[L] == R);
  Mat y(R * D, 0.0);
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t row = block_begin[l]; row < block_begin[l + 1]; ++row)
      row_times(&held[row * D], m.w_expert[p * L + l], D, D, &y[row * D]);
  // Combine: the experts' rows back in the plan's order.
  const Mat back = from_experts(rows_tensor(y), ex, ep_group).to_vector<double>();
  MoeGrads g = zero_grads(m, L);
  Mat d_back(S * D, 0.0), d_weight(d.n * k, 0.0);
  for (std::int64_t i = 0; i < S; ++i) {
    const std::int64_t c = plan.order[i], t = c / k;
    for (std::int64_t col = 0; col < D; ++col) {
      const double dout = target[t * D + col] * inv;
      g.loss += d.weight[c] * back[i * D + col] * target[t * D + col] * inv;
      d_weight[c] += dout * back[i * D + col];
      d_back[i * D + col] = d.weight[c] * dout;
    }
  }
  // Backward: the combine's gradient goes to the experts (to_experts), the experts'
  // input gradient back to the tokens' ranks (from_experts).
  const Mat dy = to_experts(rows_tensor(d_back), ex, ep_group).to_vector<double>();
  Mat d_held(R * D, 0.0);
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t row = block_begin[l]; row < block_begin[l + 1]; ++row) {
      add_outer(&held[row * D], &dy[row * D], D, D, g.w_expert[l]);
      row_times_t(&dy[row * D], m.w_expert[p * L + l], D, D, &d_held[row * D]);
    }
  const Mat d_send = from_experts(rows_tensor(d_held), ex, ep_group).to_vector<double>();
  Mat dx(d.n * D, 0.0);
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t col = 0; col < D; ++col)
      dx[(plan.order[i] / k) * D + col] += d_send[i * D + col];
  moe_dense_backward(d, d_weight, dx, m, g);
  return g;
}

// ---- groups -----------------------------------------------------------------------------------

// The group of world ranks `ranks` (nullptr on a rank outside it), created on first use:
// every rank asks for the same lists in the same order, so every rank creates every group
// in the same order (dist::new_group is collective over the world).
std::shared_ptr<dist::ProcessGroup> grads_group_of(const std::vector<int>& ranks) {
  static std::map<std::vector<int>, std::shared_ptr<dist::ProcessGroup>> made;
  auto it = made.find(ranks);
  if (it != made.end()) return it->second;
  auto g = dist::new_group(ranks, "mpi", Device::cpu(),
                           testing::quiet_options(testing::test_timeout_s()));
  made.emplace(ranks, g);
  return g;
}

// The EP group of `ep` consecutive world ranks that holds this rank.
dist::ProcessGroup& grads_ep_group(int ep) {
  std::shared_ptr<dist::ProcessGroup> mine;
  for (int first = 0; first < group().size(); first += ep) {
    std::vector<int> ranks;
    for (int w = first; w < first + ep; ++w) ranks.push_back(w);
    if (auto g = grads_group_of(ranks)) mine = g;
  }
  return *mine;
}

// A rule that gives each world rank its reductions (expert_grad_groups, or one of the
// test's).
using GroupRule = ExpertGradGroups (*)(int world, int ep, int rank);

// This rank's two reductions under `rule`, with their groups. Every rank checks every
// rank's lists first (ascending, in range, holding that rank, and every rank named names
// the same list back), so a wrong rule fails here on every rank alike rather than hang in a
// reduction; then every rank creates every list's group, in world-rank order.
struct RankReductions {
  ExpertGradGroups groups;
  std::shared_ptr<dist::ProcessGroup> dense, expert;
};

RankReductions reductions_under(GroupRule rule, int world, int ep) {
  std::vector<ExpertGradGroups> all;
  for (int w = 0; w < world; ++w) all.push_back(rule(world, ep, w));
  auto valid = [&](int w, const std::vector<int>& ranks, bool dense) {
    if (ranks.empty() || !std::is_sorted(ranks.begin(), ranks.end()) ||
        std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end() ||
        std::find(ranks.begin(), ranks.end(), w) == ranks.end())
      return false;
    for (int v : ranks) {
      if (v < 0 || v >= world) return false;
      if ((dense ? all[v].dense.ranks : all[v].expert.ranks) != ranks) return false;
    }
    return true;
  };
  for (int w = 0; w < world; ++w) {
    INFO("world rank " << w << " of " << world << ", EP " << ep);
    REQUIRE(valid(w, all[w].dense.ranks, true));
    REQUIRE(valid(w, all[w].expert.ranks, false));
  }
  for (int w = 0; w < world; ++w) {
    grads_group_of(all[w].dense.ranks);
    grads_group_of(all[w].expert.ranks);
  }
  const int r = group().rank();
  RankReductions out;
  out.groups = all[r];
  out.dense = grads_group_of(all[r].dense.ranks);
  out.expert = grads_group_of(all[r].expert.ranks);
  return out;
}

// v summed over `g`, then scaled.
Mat reduced(const Mat& v, dist::ProcessGroup& g, double scale) {
  Tensor t = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
  g.all_reduce(t, dist::ReduceOp::sum).wait();
  Mat out = t.to_vector<double>();
  for (double& x : out) x *= scale;
  return out;
}

// Largest |a - b| / (|b| + 1).
double rel_error(const Mat& a, const Mat& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / (std::fabs(b[i]) + 1.0));
  return worst;
}

// One step of the EP layer at EP size `ep` over the world, reduced under `rule`: this rank's
// gradients after the reductions, and the one-process reference.
struct EpStep {
  MoeGrads reduced;   // W_in, W_r and this rank's L experts
  MoeGrads expected;  // one process: every expert
  std::int64_t local_experts = 0;
  int ep_rank = 0;
};

EpStep ep_step(GroupRule rule, int ep) {
  const int world = group().size(), r = group().rank();
  const MoeWeights m = moe_weights(2 * ep);
  dist::ProcessGroup& ep_group = grads_ep_group(ep);
  const RankReductions red = reductions_under(rule, world, ep);
  const MoeGrads local = ep_rank_grads(m, r, ep_group);
  EpStep s;
  s.local_experts = 2;
  s.ep_rank = ep_group.rank();
  s.expected = one_process_grads(m, world);
  s.reduced.w_in = reduced(local.w_in, *red.dense, red.groups.dense.scale);
  s.reduced.w_router = reduced(local.w_router, *red.dense, red.groups.dense.scale);
  for (const Mat& w : local.w_expert)
    s.reduced.w_expert.push_back(reduced(w, *red.expert, red.groups.expert.scale));
  // The loss: the mean of the ranks' losses is the one process's (a check of the model).
  s.reduced.loss = reduced({local.loss}, group(), 1.0 / world)[0];
  return s;
}

// Every gradient of this rank equals the one process's at 1e-12.
void check_against_one_process(const EpStep& s) {
  CHECK(std::fabs(s.reduced.loss - s.expected.loss) < 1e-12);
  CHECK(rel_error(s.reduced.w_in, s.expected.w_in) < 1e-12);
  CHECK(rel_error(s.reduced.w_router, s.expected.w_router) < 1e-12);
  REQUIRE(s.reduced.w_expert.size() == static_cast<std::size_t>(s.local_experts));
  for (std::int64_t l = 0; l < s.local_experts; ++l) {
    INFO("local expert " << l << " (expert " << s.ep_rank * s.local_experts + l << ")");
    CHECK(rel_error(s.reduced.w_expert[l],
                    s.expected.w_expert[s.ep_rank * s.local_experts + l]) < 1e-12);
  }
}

// The trap's rule: the right groups, the expert sum divided by the ranks that hold the
// expert (world / ep of them) rather than by the world.
ExpertGradGroups expert_mean_over_holders(int world, int ep, int rank) {
  ExpertGradGroups g = defined_grad_groups(world, ep, rank);
  g.expert.scale = 1.0 / static_cast<double>(g.expert.ranks.size());
  return g;
}

// ||a|| / ||b|| (0 / 0 is 0: an expert no token chose).
double norm_ratio(const Mat& a, const Mat& b) {
  double aa = 0, bb = 0;
  for (double x : a) aa += x * x;
  for (double x : b) bb += x * x;
  return bb == 0 ? (aa == 0 ? 0 : INFINITY) : std::sqrt(aa / bb);
}

// v times s.
Mat scaled_by(Mat v, double s) {
  for (double& x : v) x *= s;
  return v;
}

}  // namespace

TEST_CASE("task5: expert_grad_groups for every world of 1 to 8 ranks, every EP size that "
          "divides it and every rank: dense over the world, experts over the ranks holding "
          "the same experts, both scaled by 1/world; other sizes refused",
          "[16_moe][task5][points:2]") {
  for (int world = 1; world <= 8; ++world)
    for (int ep = 1; ep <= world; ++ep) {
      if (world % ep != 0) continue;
      for (int rank = 0; rank < world; ++rank) {
        INFO("world " << world << ", EP " << ep << ", rank " << rank);
        const ExpertGradGroups got = expert_grad_groups(world, ep, rank);
        const ExpertGradGroups want = defined_grad_groups(world, ep, rank);
        CHECK(got.dense.ranks == want.dense.ranks);
        CHECK(got.expert.ranks == want.expert.ranks);
        CHECK(std::fabs(got.dense.scale - want.dense.scale) < 1e-15);
        CHECK(std::fabs(got.expert.scale - want.expert.scale) < 1e-15);
      }
    }
  for (auto [world, ep, rank] : {std::tuple{4, 3, 0}, std::tuple{4, 0, 0}, std::tuple{6, 4, 1},
                                 std::tuple{4, 2, 4}, std::tuple{4, 2, -1}, std::tuple{0, 1, 0}}) {
    INFO("world " << world << ", EP " << ep << ", rank " << rank);
    CHECK(testing::contains(testing::error_of([&] { expert_grad_groups(world, ep, rank); }),
                            "expert_grad_groups"));
  }
}

TEST_CASE("task5: EP over the whole world (each expert on one rank): after the reductions "
          "every gradient equals one process's over all ranks' tokens at 1e-12 (f64)",
          "[16_moe][task5][points:3]") {
  const EpStep s = ep_step(expert_grad_groups, group().size());
  check_against_one_process(s);
  CHECK(all_ranks(true));
}

TEST_CASE("task5: EP × DP, every EP size below the world that divides it (1: every rank "
          "holds every expert): every gradient equals one process's at 1e-12 (f64)",
          "[16_moe][task5][points:2]") {
  const int world = group().size();
  for (int ep = 1; ep < world; ++ep) {
    if (world % ep != 0) continue;
    INFO("world " << world << ", EP " << ep);
    check_against_one_process(ep_step(expert_grad_groups, ep));
  }
  CHECK(all_ranks(true));
}

TEST_CASE("the trap: expert gradients divided by the number of ranks that hold the expert, "
          "not by the world, come out EP times too large (exactly 2× at 2 ranks with EP 2); "
          "the dense gradients are right",
          "[16_moe]") {
  const int world = group().size();
  for (int ep = 1; ep <= world; ++ep) {
    if (world % ep != 0) continue;
    INFO("world " << world << ", EP " << ep);
    const EpStep right = ep_step(defined_grad_groups, ep);
    check_against_one_process(right);
    const EpStep wrong = ep_step(expert_mean_over_holders, ep);
    CHECK(rel_error(wrong.reduced.w_in, wrong.expected.w_in) < 1e-12);
    CHECK(rel_error(wrong.reduced.w_router, wrong.expected.w_router) < 1e-12);
    for (std::int64_t l = 0; l < wrong.local_experts; ++l) {
      const Mat& want = wrong.expected.w_expert[wrong.ep_rank * wrong.local_experts + l];
      const Mat& got = wrong.reduced.w_expert[l];
      // ep = world / (the ranks holding an expert): 1 when every rank holds every expert.
      const double ratio = norm_ratio(got, want);
      INFO("local expert " << l << ": |wrong| / |one process| = " << ratio);
      CHECK((ratio == 0 || std::fabs(ratio - ep) < 1e-12 * ep));
      CHECK(rel_error(got, scaled_by(want, ep)) < 1e-12 * ep);
      // Where the world is a power of two both scales are too, so the wrong sum is exactly
      // ep times the right one, bit for bit.
      if ((world & (world - 1)) == 0) CHECK(got == scaled_by(right.reduced.w_expert[l], ep));
    }
  }
  CHECK(all_ranks(true));
}

TEST_CASE("the test's MoE layer: its one-process gradients agree with central differences of "
          "its loss", "[16_moe]") {
  const MoeWeights m = moe_weights(4);
  const int world = 2;
  const MoeGrads g = one_process_grads(m, world);
  const double h = 1e-6;
  auto loss_with = [&](auto&& change) {
    MoeWeights c = m;
    change(c);
    return one_process_grads(c, world).loss;
  };
  auto check_entry = [&](const char* what, double analytic, auto&& at) {
    INFO(what);
    const double up = loss_with([&](MoeWeights& c) { at(c) += h; });
    const double down = loss_with([&](MoeWeights& c) { at(c) -= h; });
    CHECK(std::fabs((up - down) / (2 * h) - analytic) < 1e-8);
  };
  for (std::int64_t i = 0; i < kMoeIn * kMoeWidth; i += 5)
    check_entry("W_in", g.w_in[i], [&](MoeWeights& c) -> double& { return c.w_in[i]; });
  for (std::int64_t i = 0; i < kMoeWidth * 4; i += 3)
    check_entry("W_r", g.w_router[i], [&](MoeWeights& c) -> double& { return c.w_router[i]; });
  for (std::int64_t e = 0; e < 4; ++e)
    for (std::int64_t i = 0; i < kMoeWidth * kMoeWidth; i += 7)
      check_entry("W_e", g.w_expert[e][i],
                  [&](MoeWeights& c) -> double& { return c.w_expert[e][i]; });
}
