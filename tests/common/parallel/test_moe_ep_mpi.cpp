// mgpu::parallel::moe's MoE layer under expert parallelism, under mpirun (1 to 4 ranks): EP
// over the world and, at 4 ranks, EP 2 × DP 2. Dropless, every output and gradient equals
// one process over all ranks' tokens (f64, 1e-12) once the gradients are reduced as
// expert_grad_groups says; with capacity, each rank drops exactly what one process drops on
// that rank's tokens; the rows per expert and the bytes of every all-to-all are exact; the
// initialisation and the balancing bias match one process's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "moe_test_util.h"
#include "forwarding_group.h"
#include "groups.h"
#include "mgpu/copy.h"
#include "mgpu/nn/init.h"
#include "mgpu/nn/linear.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/moe/expert_grads.h"
#include "mgpu/parallel/moe/load_balance.h"
#include "mgpu/parallel/moe/moe_layer.h"
#include "mgpu/parallel/moe/routing.h"
#include "random_data.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace moe = mgpu::parallel::moe;

namespace {

constexpr double kMoeEpTol = 1e-12;
constexpr std::int64_t kMoeEpTokens = 10, kMoeEpDim = 6, kMoeEpHidden = 8;

// An EP group of `ep` consecutive world ranks and the ranks holding the same experts (one
// per EP group): created once per ep, in the same order on every rank.
struct MoeEpGroups {
  std::shared_ptr<dist::ProcessGroup> ep;        ///< this rank's EP group
  std::shared_ptr<dist::ProcessGroup> replicas;  ///< the ranks with this rank's experts
  std::vector<int> replica_ranks;                ///< their world ranks
};

std::shared_ptr<dist::ProcessGroup> moeep_new_group(const std::vector<int>& ranks) {
  return dist::new_group(ranks, "mpi", Device::cpu(), quiet_options(test_timeout_s()));
}

const MoeEpGroups& moeep_groups(int ep) {
  static std::map<int, MoeEpGroups> made;
  auto it = made.find(ep);
  if (it != made.end()) return it->second;
  const int W = group().size();
  MoeEpGroups g;
  for (int i = 0; i < W / ep; ++i) {
    std::vector<int> ranks;
    for (int j = 0; j < ep; ++j) ranks.push_back(i * ep + j);
    if (auto x = moeep_new_group(ranks)) g.ep = x;
  }
  for (int j = 0; j < ep; ++j) {
    std::vector<int> ranks;
    for (int w = j; w < W; w += ep) ranks.push_back(w);
    if (auto x = moeep_new_group(ranks)) {
      g.replicas = x;
      g.replica_ranks = ranks;
    }
  }
  return made.emplace(ep, g).first->second;
}

// The EP sizes to test at this world size: the world, and 2 × DP 2 at 4 ranks.
std::vector<int> moeep_sizes() {
  const int W = group().size();
  std::vector<int> eps{W};
  if (W == 4) eps.push_back(2);
  return eps;
}

moe::MoEConfig moeep_config(int ep, double capacity_factor, double aux_alpha) {
  moe::MoEConfig c;
  c.dim = kMoeEpDim;
  c.hidden = kMoeEpHidden;
  c.experts = ep % 3 == 0 ? 12 : 4;  // P divides E
  c.k = 2;
  c.capacity_factor = capacity_factor;
  c.aux_alpha = aux_alpha;
  return c;
}

// The EP layer over `ep_group` with `full`'s parameters (by name).
std::shared_ptr<moe::MoE> moeep_split(moe::MoE& full,
                                      std::shared_ptr<dist::ProcessGroup> ep_group) {
  auto m = std::make_shared<moe::MoE>(full.config(), std::move(ep_group));
  m->to(DType::f64);
  for (auto& [name, p] : m->named_parameters()) copy_(p->value, full.parameter(name).value);
  return m;
}

// `t` reduced as `red` says: summed over red.ranks (`over`, or the world when every rank is
// listed), then scaled.
Tensor moeep_reduce(const Tensor& t, const moe::GradReduction& red, dist::ProcessGroup& over) {
  Tensor s = t.clone();
  if (static_cast<int>(red.ranks.size()) == group().size())
    group().all_reduce(s).wait();
  else
    over.all_reduce(s).wait();
  scale_(s, red.scale);
  return s;
}

// This world rank's rows of the global [W·N, M] tensor.
Tensor moeep_mine(const Tensor& global) {
  const int r = group().rank();
  return global.slice(r * kMoeEpTokens, (r + 1) * kMoeEpTokens).clone();
}

// The bytes each all-to-all sends and receives on this rank.
class MoeEpCountingGroup : public ForwardingGroup {
 public:
  using ForwardingGroup::ForwardingGroup;
  /// One all-to-all's bytes on this rank.
  struct Bytes {
    std::int64_t sent;      ///< the input's bytes
    std::int64_t received;  ///< the output's bytes
  };
  std::vector<Bytes> all_to_alls;  ///< in the order issued

  dist::Work all_to_all(const Tensor& out, const Tensor& in,
                        const std::vector<std::int64_t>& out_splits,
                        const std::vector<std::int64_t>& in_splits) override {
    all_to_alls.push_back({static_cast<std::int64_t>(in.nbytes()),
                           static_cast<std::int64_t>(out.nbytes())});
    return ForwardingGroup::all_to_all(out, in, out_splits, in_splits);
  }
};

// For each EP size (INFO naming it): body(ep, groups, config, full), with the config for that
// size and capacity_factor, aux_alpha, and a MoE drawn from `seed` for one process.
template <typename Body>
void moeep_each_plan(double capacity_factor, double aux_alpha, unsigned seed, Body body) {
  for (int ep : moeep_sizes()) {
    INFO("EP " << ep << " x DP " << group().size() / ep);
    const moe::MoEConfig c = moeep_config(ep, capacity_factor, aux_alpha);
    body(ep, moeep_groups(ep), c, random_moe(c, seed));
  }
}

}  // namespace

TEST_CASE("moe ep: dropless outputs and every gradient equal one process over all tokens",
          "[moe_ep]") {
  const int W = group().size(), r = group().rank();
  double worst = 0;
  moeep_each_plan(0, 0, 11, [&](int ep, const MoeEpGroups& g, const moe::MoEConfig& /*c*/,
                                const std::shared_ptr<moe::MoE>& full) {
    const std::int64_t NW = W * kMoeEpTokens;
    const Tensor X = random_tensor({NW, kMoeEpDim}, 12), G = random_tensor({NW, kMoeEpDim}, 13);
    // One process, the loss the mean over the world's tokens: (1/W) Σ_rank mean_rank.
    const Tensor y_ref = full->forward(X);
    const Tensor dx_ref = full->backward(scale(G, 1.0 / static_cast<double>(NW)));
    // Each rank, its loss the mean over its own tokens.
    auto split = moeep_split(*full, g.ep);
    const Tensor y = split->forward(moeep_mine(X));
    const Tensor dx = split->backward(scale(moeep_mine(G), 1.0 / kMoeEpTokens));
    const double dy_diff = max_rel_diff(y, moeep_mine(y_ref));
    const double dx_diff = max_rel_diff(scale(dx, 1.0 / W), moeep_mine(dx_ref));
    CHECK(all_ranks(dy_diff < kMoeEpTol));
    CHECK(all_ranks(dx_diff < kMoeEpTol));
    worst = std::max({worst, dy_diff, dx_diff});
    CHECK(all_ranks(split->stats().dropped == 0));
    const moe::ExpertGradGroups red = moe::expert_grad_groups(W, ep, r);
    CHECK(red.expert.ranks == g.replica_ranks);
    for (auto& [name, p] : split->named_parameters()) {
      INFO("parameter " << name);
      const bool dense = name.rfind("router.", 0) == 0;
      const Tensor got = moeep_reduce(p->grad, dense ? red.dense : red.expert, *g.replicas);
      const double d = max_rel_diff(got, full->parameter(name).grad);
      CHECK(d < kMoeEpTol);
      worst = std::max(worst, d);
    }
  });
  worst = max_over_ranks(worst);
  if (r == 0) WARN("dropless EP against one process: largest relative difference " << worst);
}

TEST_CASE("moe ep: with capacity each rank drops what one process drops on its tokens",
          "[moe_ep]") {
  const int W = group().size(), r = group().rank();
  double worst = 0;
  moeep_each_plan(0.75, 0.02, 21, [&](int ep, const MoeEpGroups& g, const moe::MoEConfig& c,
                                      const std::shared_ptr<moe::MoE>& full) {
    const Tensor X = random_tensor({W * kMoeEpTokens, kMoeEpDim}, 22);
    const Tensor G = random_tensor({W * kMoeEpTokens, kMoeEpDim}, 23);
    auto split = moeep_split(*full, g.ep);
    const Tensor y = split->forward(moeep_mine(X));
    const moe::MoEStats st = split->stats();
    const Tensor dx = split->backward(scale(moeep_mine(G), 1.0 / kMoeEpTokens));
    // The drop rule itself, from lesson 16's functions on this rank's tokens.
    const Tensor probs = softmax(matmul(moeep_mine(X), full->router_weight().value, false, true));
    const moe::Routing routing = moe::route_top_k(probs, c.k);
    const std::int64_t cap = moe::expert_capacity(kMoeEpTokens, c.k, c.experts, c.capacity_factor);
    const std::vector<std::int64_t> slots = moe::capacity_slots(routing, cap);
    std::vector<std::int64_t> kept(c.experts, 0);
    std::int64_t dropped = 0;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (slots[i] < 0) ++dropped;
      else ++kept[routing.expert[i]];
    }
    CHECK(all_ranks(st.tokens_per_expert == kept && st.dropped == dropped && st.capacity == cap));
    CHECK(max_over_ranks(static_cast<double>(dropped)) > 0);
    // One process on each rank's tokens (that rank's loss): the same outputs and router
    // gradient here; this rank's experts' gradients the sum over its EP group's ranks.
    const int first = r / ep * ep;
    std::map<std::string, Tensor> expert_sum;
    for (int q = first; q < first + ep; ++q) {
      auto one = std::static_pointer_cast<moe::MoE>(full->clone());
      one->zero_grad();
      const Tensor xq = X.slice(q * kMoeEpTokens, (q + 1) * kMoeEpTokens).clone();
      const Tensor gq = G.slice(q * kMoeEpTokens, (q + 1) * kMoeEpTokens).clone();
      const Tensor yq = one->forward(xq);
      const moe::MoEStats sq = one->stats();
      const Tensor dxq = one->backward(scale(gq, 1.0 / kMoeEpTokens));
      for (auto& [name, p] : one->named_parameters()) {
        if (name.rfind("experts.", 0) != 0) continue;
        auto it = expert_sum.find(name);
        if (it == expert_sum.end()) expert_sum.emplace(name, p->grad.clone());
        else add_(it->second, p->grad);
      }
      if (q != r) continue;
      CHECK(st.tokens_per_expert == sq.tokens_per_expert);
      CHECK(st.routed_per_expert == sq.routed_per_expert);
      CHECK(st.tokens_all_dropped == sq.tokens_all_dropped);
      CHECK(st.aux_loss == Approx(sq.aux_loss).epsilon(1e-14));
      const double d1 = max_rel_diff(y, yq), d2 = max_rel_diff(dx, dxq);
      const double d3 = max_rel_diff(split->router_weight().grad, one->router_weight().grad);
      CHECK(d1 < kMoeEpTol);
      CHECK(d2 < kMoeEpTol);
      CHECK(d3 < kMoeEpTol);
      worst = std::max({worst, d1, d2, d3});
    }
    for (auto& [name, p] : split->named_parameters()) {
      if (name.rfind("experts.", 0) != 0) continue;
      INFO("parameter " << name);
      const double d = max_rel_diff(p->grad, expert_sum.at(name));
      CHECK(d < kMoeEpTol);
      worst = std::max(worst, d);
    }
  });
  worst = max_over_ranks(worst);
  if (r == 0)
    WARN("EP with capacity against one process per rank: largest relative difference " << worst);
}

TEST_CASE("moe ep: rows per expert and the bytes of every all-to-all are exact", "[moe_ep]") {
  const int W = group().size();
  for (int ep : moeep_sizes()) {
    INFO("EP " << ep << " x DP " << W / ep);
    const MoeEpGroups& g = moeep_groups(ep);
    const moe::MoEConfig c = moeep_config(ep, 0, 0);
    const std::int64_t E = c.experts, L = E / ep, k = c.k, M = c.dim, f64 = 8;
    auto full = random_moe(c, 31);
    const Tensor X = random_tensor({W * kMoeEpTokens, kMoeEpDim}, 32);
    // One process on this EP group's tokens: what each expert receives.
    const int first = g.ep->rank() == 0 ? group().rank() : group().rank() - g.ep->rank();
    full->eval();
    full->forward(X.slice(first * kMoeEpTokens, (first + ep) * kMoeEpTokens).clone());
    const std::vector<std::int64_t> group_tpe = full->stats().tokens_per_expert;
    auto counting = std::make_shared<MoeEpCountingGroup>(*g.ep);
    auto split = moeep_split(*full, counting);
    split->forward(moeep_mine(X));
    const moe::MoEStats st = split->stats();
    split->backward(moeep_mine(X));
    std::int64_t R = 0;
    std::vector<std::int64_t> want_rows;
    for (std::int64_t l = 0; l < L; ++l) {
      want_rows.push_back(group_tpe[split->first_expert() + l]);
      R += want_rows.back();
    }
    const std::int64_t S = kMoeEpTokens * k;
    CHECK(st.expert_rows == want_rows);
    CHECK(st.rows_sent == S);
    CHECK(st.rows_received == R);
    Tensor tpe = Tensor::from_vector(st.tokens_per_expert, {E});
    g.ep->all_reduce(tpe).wait();
    CHECK(tpe.to_vector<std::int64_t>() == group_tpe);
    // Forward: the counts, the rows out, the rows back; backward: the row gradients out, back.
    using B = MoeEpCountingGroup::Bytes;
    const std::vector<B> want{{E * 8, E * 8},
                              {S * M * f64, R * M * f64},
                              {R * M * f64, S * M * f64},
                              {S * M * f64, R * M * f64},
                              {R * M * f64, S * M * f64}};
    REQUIRE(counting->all_to_alls.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("all-to-all " << i);
      CHECK(counting->all_to_alls[i].sent == want[i].sent);
      CHECK(counting->all_to_alls[i].received == want[i].received);
    }
  }
}

TEST_CASE("moe ep: every rank draws one process's parameters and keeps one bias", "[moe_ep]") {
  const int W = group().size();
  for (int ep : moeep_sizes()) {
    INFO("EP " << ep << " x DP " << W / ep);
    const MoeEpGroups& g = moeep_groups(ep);
    moe::MoEConfig c = moeep_config(ep, 0, 0);
    c.bias_gamma = 0.125;
    nn::manual_seed(41);
    moe::MoE full(c);
    nn::Linear after_full(3, 3);
    nn::manual_seed(41);
    moe::MoE split(c, g.ep);
    nn::Linear after_split(3, 3);
    CHECK(static_cast<std::int64_t>(split.named_parameters().size()) == 1 + 4 * c.experts / ep);
    for (auto& [name, p] : split.named_parameters()) {
      INFO("parameter " << name);
      CHECK(same_bits(p->value, full.parameter(name).value));
    }
    CHECK(same_bits(after_split.weight().value, after_full.weight().value));
    // The bias: the load of every rank's tokens, summed over the world.
    full.to(DType::f64);
    split.to(DType::f64);
    const Tensor X = random_tensor({W * kMoeEpTokens, kMoeEpDim}, 42);
    full.forward(X);
    full.clear_saved();
    split.forward(moeep_mine(X));
    split.clear_saved();
    std::vector<double> want(c.experts, 0.0);
    moe::update_expert_bias(want, full.stats().routed_per_expert, c.bias_gamma);
    split.update_bias(group());
    CHECK(all_ranks(split.expert_bias() == want));
  }
}

TEST_CASE("moe ep on CUDA: each rank's outputs and gradients equal the CPU run's",
          "[moe_ep][gpu]") {
  const int W = group().size();
  // rank_gpu_group() lives as long as the program: share it without owning it.
  std::shared_ptr<dist::ProcessGroup> gpu_group(&rank_gpu_group(), [](dist::ProcessGroup*) {});
  std::shared_ptr<dist::ProcessGroup> cpu_group(&group(), [](dist::ProcessGroup*) {});
  const Device dev = gpu_group->device();
  for (double factor : {0.0, 0.75}) {
    INFO("capacity factor " << factor);
    auto full = random_moe(moeep_config(W, factor, 0.02), 51);
    const Tensor X = random_tensor({W * kMoeEpTokens, kMoeEpDim}, 52);
    const Tensor G = random_tensor({W * kMoeEpTokens, kMoeEpDim}, 53);
    auto on_cpu = moeep_split(*full, cpu_group);
    auto on_gpu = moeep_split(*full, gpu_group);
    on_gpu->to(dev);
    const Tensor y_cpu = on_cpu->forward(moeep_mine(X));
    const Tensor dx_cpu = on_cpu->backward(moeep_mine(G));
    const Tensor y_gpu = on_gpu->forward(moeep_mine(X).to(dev));
    CHECK(on_gpu->stats().tokens_per_expert == on_cpu->stats().tokens_per_expert);
    const Tensor dx_gpu = on_gpu->backward(moeep_mine(G).to(dev));
    CHECK(all_ranks(max_rel_diff(y_gpu.to(Device::cpu()), y_cpu) < 1e-11));
    CHECK(all_ranks(max_rel_diff(dx_gpu.to(Device::cpu()), dx_cpu) < 1e-11));
    for (auto& [name, p] : on_cpu->named_parameters()) {
      INFO("parameter " << name);
      CHECK(max_rel_diff(on_gpu->parameter(name).grad.to(Device::cpu()), p->grad) < 1e-11);
    }
  }
}
