// The planner's step time (planner.h): compute and TP's all-reduces per micro-batch on the
// slowest stage, EP's all-to-alls, the pipeline's bubble and messages, DP's gradient
// reduction (dense and expert groups), the floor.
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
  // Links: TP on consecutive ranks, DP tp apart, PP tp·dp apart; EP groups ep consecutive
  // replicas (tp apart), the expert-data group the replicas tp·ep apart.
  const AlphaBeta tp_link = group_link(cluster.hardware, l.tp, 1);
  const AlphaBeta dp_link = group_link(cluster.hardware, l.dp, l.tp);
  const AlphaBeta pp_link = group_link(cluster.hardware, l.pp, l.tp * l.dp);
  const AlphaBeta edp_link = group_link(cluster.hardware, l.dp / l.ep, l.tp * l.ep);
  const double w = job.precision.value_bytes(), g = job.precision.grad_bytes();
  const double tp_allreduce = ring_allreduce_seconds(tp_link, N * C * w, l.tp);
  // EP: 4 all-to-alls per MoE block and micro-batch, k·N tokens of C values on each rank.
  const double ep_alltoall = group_alltoall_seconds(
      cluster.hardware, static_cast<double>(m.moe.top_k) * N * C * w, l.ep, l.tp);
  // One micro-batch's forward and backward on the slowest stage. FLOPs per token and block:
  // 2 per matrix parameter it meets + the attention core's 4TC, forward; twice that
  // backward; + the recomputed forward.
  double t_mb = 0, stage_params_max = 0, expert_params_max = 0;
  std::int64_t first_block = 0;
  for (int s = 0; s < l.pp; ++s) {
    const std::int64_t blocks = blocks_of_stage(m.n_layer, l.pp, s);
    double flops_per_token = 0;
    for (std::int64_t blk = first_block; blk < first_block + blocks; ++blk) {
      const double forward = 2 * block_matmul_parameters(m, blk) + 4 * T * C;
      double redo = 0;
      if (job.recompute == "full") redo += forward;
      if (job.recompute == "selective" && !job.flash_attention) redo += 4 * T * C;  // QKᵀ, AV
      if (job.flash_attention) redo += 2 * T * C;  // QKᵀ again in flash attention's backward
      flops_per_token += (3 * forward + redo) / tp;
    }
    if (s == l.pp - 1) flops_per_token += 3 * 2 * C * V / tp;
    const double compute = flops_per_token * N / cluster.flops * slowdown;
    const double comm = static_cast<double>(blocks) * 4 * tp_allreduce;
    const double ep_comm =
        static_cast<double>(moe_layers_in(m, first_block, first_block + blocks)) * 4 * ep_alltoall;
    if (compute + comm + ep_comm >= t_mb) {
      t_mb = compute + comm + ep_comm;
      e.compute_s = micro * compute;
      e.tp_comm_s = micro * comm;
      e.ep_comm_s = micro * ep_comm;
    }
    stage_params_max = std::max(stage_params_max, stage_parameters(m, l, s));
    expert_params_max = std::max(expert_params_max, stage_expert_parameters(m, l, s));
    first_block += blocks;
  }
  const double v = job.schedule == "interleaved" ? job.virtual_stages : 1;
  e.bubble_s = (l.pp - 1) / v * t_mb;
  if (l.pp > 1) {
    const double message = pp_link.alpha + N * C * w * pp_link.beta;
    e.pp_comm_s = 2 * (micro + l.pp - 2) * message +  // + the tied table's all-reduce
                  (m.tied_head ? ring_allreduce_seconds(pp_link, V * C * g, 2) : 0);
  }
  // DP: a reduce-scatter or an all-gather is half a ring all-reduce (the same p-1 steps);
  // the dense parameters over all dp replicas, the routed experts' over the dp/ep that
  // hold the same experts.
  const auto data_parallel = [&](const AlphaBeta& link, double psi, int p) {
    const double reduce_scatter = 0.5 * ring_allreduce_seconds(link, psi * g, p);
    const double all_gather = 0.5 * ring_allreduce_seconds(link, psi * w, p);
    switch (job.zero_stage) {
      case 0: return ring_allreduce_seconds(link, psi * g, p);
      case 1: return reduce_scatter + all_gather;
      case 2: return micro * reduce_scatter + all_gather;
      default: return micro * (reduce_scatter + 2 * all_gather);
    }
  };
  e.dp_comm_s = data_parallel(dp_link, stage_params_max, l.dp);
  if (expert_params_max > 0) e.dp_comm_s += data_parallel(edp_link, expert_params_max, l.dp / l.ep);
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
