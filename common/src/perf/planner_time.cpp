// The planner's step time (planner.h): compute and TP's all-reduces per micro-batch on the
// slowest stage, the pipeline's bubble and messages, DP's gradient reduction, the floor.
#include <algorithm>
#include <cmath>

#include "mgpu/error.h"
#include "mgpu/perf/planner.h"

namespace mgpu::perf {

AlphaBeta group_link(const Hardware& hw, int size, int stride) {
  if (size <= 1) return AlphaBeta{};
  const int G = std::max(1, hw.gpus_per_node);
  if (static_cast<long long>(size) * stride <= G)  // the whole group inside one node
    return AlphaBeta{hw.intra_latency_s, hw.intra_busbw > 0 ? 1.0 / hw.intra_busbw : 0};
  // Across nodes: the groups of this kind all communicate at once, so each node's network
  // is shared among its GPUs; a group with k ranks on a node gets k GPUs' shares.
  const int on_a_node = std::max(1, std::min(size, G / std::max(1, stride)));
  Hardware spanned = hw;
  spanned.nodes = std::max(2, static_cast<int>((static_cast<long long>(size) * stride + G - 1) / G));
  spanned.inter_bw = hw.inter_bw * on_a_node / G;
  return effective_link(spanned);
}

TimeEstimate estimate_time(const ModelShape& m, const JobSettings& job, const Cluster& cluster,
                           const Layout& l) {
  MGPU_CHECK(cluster.flops > 0, "plan: the cluster's FLOP/s must be positive (", cluster.flops, ")");
  const double C = static_cast<double>(m.n_embd), V = static_cast<double>(m.vocab_size);
  const double T = static_cast<double>(m.seq), tp = l.tp;
  const double N = static_cast<double>(job.micro_batch) * T;  // tokens per micro-batch
  TimeEstimate e;
  e.micro_batches = job.global_batch / (l.dp * job.micro_batch);
  const double micro = static_cast<double>(e.micro_batches);
  const double ranks = static_cast<double>(l.dp) * l.tp * l.pp;
  const double slowdown =
      cluster.compute_devices > 0 ? std::max(1.0, ranks / cluster.compute_devices) : 1.0;
  // Links: TP on consecutive ranks, DP tp apart, PP tp·dp apart.
  const AlphaBeta tp_link = group_link(cluster.hardware, l.tp, 1);
  const AlphaBeta dp_link = group_link(cluster.hardware, l.dp, l.tp);
  const AlphaBeta pp_link = group_link(cluster.hardware, l.pp, l.tp * l.dp);
  const double w = job.precision.value_bytes(), g = job.precision.grad_bytes();
  const double tp_allreduce = ring_allreduce_seconds(tp_link, N * C * w, l.tp);
  // FLOPs per token and block beyond forward + backward: the recomputed forward.
  double redo = 0;
  if (job.recompute == "full") redo += 24 * C * C + 4 * T * C;
  if (job.recompute == "selective" && !job.flash_attention) redo += 4 * T * C;  // QKᵀ, AV
  if (job.flash_attention) redo += 2 * T * C;  // QKᵀ again in flash attention's backward
  // One micro-batch's forward and backward on the slowest stage.
  double t_mb = 0, stage_params_max = 0;
  for (int s = 0; s < l.pp; ++s) {
    const double blocks = static_cast<double>(blocks_of_stage(m.n_layer, l.pp, s));
    double flops_per_token = blocks * (3 * (24 * C * C + 4 * T * C) + redo) / tp;
    if (s == l.pp - 1) flops_per_token += 3 * 2 * C * V / tp;
    const double compute = flops_per_token * N / cluster.flops * slowdown;
    const double comm = blocks * 4 * tp_allreduce;
    if (compute + comm >= t_mb) {
      t_mb = compute + comm;
      e.compute_s = micro * compute;
      e.tp_comm_s = micro * comm;
    }
    stage_params_max = std::max(stage_params_max, stage_parameters(m, l, s));
  }
  const double v = job.schedule == "interleaved" ? job.virtual_stages : 1;
  e.bubble_s = (l.pp - 1) / v * t_mb;
  if (l.pp > 1) {
    const double message = pp_link.alpha + N * C * w * pp_link.beta;
    e.pp_comm_s = 2 * (micro + l.pp - 2) * message +
                  ring_allreduce_seconds(pp_link, V * C * g, 2);  // the tied table
  }
  // DP: a reduce-scatter or an all-gather is half a ring all-reduce (the same p-1 steps).
  const double psi = stage_params_max;
  const double reduce_scatter = 0.5 * ring_allreduce_seconds(dp_link, psi * g, l.dp);
  const double all_gather = 0.5 * ring_allreduce_seconds(dp_link, psi * w, l.dp);
  switch (job.zero_stage) {
    case 0: e.dp_comm_s = ring_allreduce_seconds(dp_link, psi * g, l.dp); break;
    case 1: e.dp_comm_s = reduce_scatter + all_gather; break;
    case 2: e.dp_comm_s = micro * reduce_scatter + all_gather; break;
    default: e.dp_comm_s = micro * (reduce_scatter + 2 * all_gather); break;
  }
  e.fixed_s = cluster.step_floor_s;
  return e;
}

std::vector<PlanEntry> plan_layouts(const ModelShape& model, const JobSettings& job,
                                    const Cluster& cluster) {
  std::vector<PlanEntry> out;
  for (const Layout& l : candidate_layouts(cluster.hardware.ranks(), model, job)) {
    PlanEntry e{l, estimate_memory(model, job, l), estimate_time(model, job, cluster, l), false};
    e.fits = cluster.memory_bytes <= 0 || e.memory.total() <= cluster.memory_bytes;
    out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const PlanEntry& a, const PlanEntry& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.time.step_s() < b.time.step_s();
    return a.memory.total() < b.memory.total();
  });
  return out;
}

int mark_ties(std::vector<PlanEntry>& plan, double relative_error) {
  const PlanEntry* best = nullptr;
  for (const PlanEntry& e : plan)
    if (e.fits && (best == nullptr || e.time.step_s() < best->time.step_s())) best = &e;
  if (best == nullptr) return 0;
  const double limit = best->time.step_s() * (1 + relative_error);
  int marked = 0;
  for (PlanEntry& e : plan) {
    e.tie = e.fits && e.time.step_s() <= limit;
    marked += e.tie ? 1 : 0;
  }
  if (marked == 1) {  // the fastest alone: no tie
    for (PlanEntry& e : plan) e.tie = false;
    marked = 0;
  }
  return marked;
}

}  // namespace mgpu::perf
