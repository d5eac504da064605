// A ParallelGpt's training step: one stage under DDP (forward, loss, backward, the buckets
// averaged while it runs), or the pipeline's schedule with send/recv between the stages and
// the gradients averaged after it.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/host_reads.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"
#include "parallel_gpt_impl.h"

namespace mgpu::parallel::gpt {
namespace {

using Clock = std::chrono::steady_clock;

// Collectives issued so far on each of the grid's groups.
GroupCounts counts(const ParallelGpt::Impl& I) {
  std::int64_t cp = I.cp_group().collectives_issued();
  if (I.hybrid.ulysses) cp += I.hybrid.ulysses->collectives_issued() + I.hybrid.ring->collectives_issued();
  const bool ep = I.grid->shape().ep > 1;
  return {I.tp_group().collectives_issued(), cp,
          I.dp_group().collectives_issued(), I.pp_group().collectives_issued(),
          I.data_group().collectives_issued(),
          ep ? I.grid->ep_group()->collectives_issued() : 0,
          ep ? I.grid->expert_data_group().collectives_issued() : 0};
}

GroupCounts since(const GroupCounts& now, const GroupCounts& before) {
  return {now.tp - before.tp, now.cp - before.cp, now.dp - before.dp, now.pp - before.pp,
          now.data - before.data, now.ep - before.ep, now.expert_data - before.expert_data};
}

// What this rank issued so far on its groups, each group once (the data group may be the
// DP group; the EP and expert-data groups where EP is above 1), and the part of it on the
// CP group and the hybrid's two sub-groups.
struct TrafficSoFar {
  dist::Traffic all, cp;
};

TrafficSoFar traffic(const ParallelGpt::Impl& I) {
  std::vector<const dist::ProcessGroup*> cp{&I.cp_group()};
  if (I.hybrid.ulysses) cp.insert(cp.end(), {I.hybrid.ulysses.get(), I.hybrid.ring.get()});
  std::vector<const dist::ProcessGroup*> all = cp;
  all.insert(all.end(), {&I.tp_group(), &I.dp_group(), &I.pp_group(), &I.data_group()});
  if (I.grid->ep_group())  // the MoE layers' all-to-alls, the experts' gradients
    all.insert(all.end(), {I.grid->ep_group().get(), &I.grid->expert_data_group()});
  auto sum = [](std::vector<const dist::ProcessGroup*> groups) {
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    dist::Traffic t;
    for (const dist::ProcessGroup* g : groups) t += g->traffic();
    return t;
  };
  return {sum(all), sum(cp)};
}

// The process's peak above `base`, the attention cores' carried peaks included (a core
// resets the peak to measure its own).
std::size_t step_peak(const ParallelGpt::Impl& I, const Device& device, std::size_t base) {
  std::size_t peak = memory_stats(device).peak_allocated;
  for (const auto& core : I.cores) peak = std::max(peak, core->stats().carried_peak);
  return peak - base;
}

// The start of a step: the gradients zeroed, the peak counters reset, what is allocated
// and the collectives issued so far noted.
struct StepStart {
  std::size_t base = 0;
  GroupCounts before;
  TrafficSoFar traffic_before;
  std::int64_t all_before = 0;
  std::int64_t reads_before = 0;
};

StepStart start_step(ParallelGpt::Impl& I, const Device& device) {
  I.parts->zero_grad();
  reset_peak_memory(device);
  for (auto& core : I.cores) core->reset_carried_peak();
  I.kept = 0;
  return {memory_stats(device).allocated, counts(I), traffic(I), I.grid->collectives_issued(), host_reads()};
}

// The end of a step: what the blocks kept, the collectives and their bytes, the whole
// step's peak.
void finish_step(const ParallelGpt::Impl& I, const Device& device, const StepStart& start,
                 StepReport& report) {
  report.kept_bytes = I.kept;
  report.by_group = since(counts(I), start.before);
  report.collectives = I.grid->collectives_issued() - start.all_before;
  const TrafficSoFar now = traffic(I);
  report.traffic = now.all - start.traffic_before.all;
  report.cp_traffic = now.cp - start.traffic_before.cp;
  report.peak_bytes = step_peak(I, device, start.base);
  report.host_reads = host_reads() - start.reads_before;
}

// The mean over `group` of each rank's `loss` ([1] f64 on the group's device, where NCCL
// moves it): divided by the group's size, then summed. Nothing is read to the host.
void mean_over(dist::ProcessGroup& group, Tensor& loss) {
  if (group.size() == 1) return;
  scale_(loss, 1.0 / group.size());
  group.all_reduce(loss, dist::ReduceOp::sum).wait();
}

}  // namespace

StepReport ParallelGpt::Impl::ddp_step(const HostIds& ids, const HostIds& targets) {
  StepReport report;
  const HostIds ids_r = local_columns(ids);
  const Device device = pp_group().device();
  const Tensor ids_d = ids_r.on(device), targets_r = local_columns(targets).on(device);
  const StepStart step = start_step(*this, device);
  const auto start = Clock::now();
  nn::Module& trained = ddp ? static_cast<nn::Module&>(*ddp) : static_cast<nn::Module&>(*parts);
  step_ids = &ids_r;  // what the forward looks up; DDP passes on their copy on the device
  const Tensor logits = trained.forward(ids_d);  // this rank's logits (its columns if split)
  step_ids = nullptr;
  report.logits_bytes = logits.nbytes();
  Tensor mean = loss(0, logits, targets_r);
  const Tensor grad_logits = head_saved.at(0).grad;  // a handle: head_backward erases the saved
  trained.backward(grad_logits);                      // under DDP: averaged over the data group
  report.backward_peak_bytes = step_peak(*this, device, step.base);
  reduce_replicated_grads();
  // The mean over every token: each rank's mean over its tokens weighs 1/(CP·DP), DDP's
  // average over the data group.
  mean_over(data_group(), mean);
  report.loss = mean.to_vector<double>()[0];  // the step's one host read
  finish_step(*this, device, step, report);
  report.busy_s = report.span_s = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

StepReport ParallelGpt::Impl::pipeline_step(const HostIds& ids, const HostIds& targets) {
  const std::int64_t b = ids.B / m;
  const HostIds ids_r = local_columns(ids);
  const std::int64_t T_act = activation_T(ids_r.T);
  const DType dtype = parts->parameters().front()->value.dtype();
  const Device device = pp_group().device();
  const Tensor targets_r = local_columns(targets).on(device);
  Tensor loss_sum = Tensor::zeros({1}, DType::f64, device);  // the last stage's, on the device
  StepReport report;
  const StepStart step = start_step(*this, device);
  dist::ProcessGroup& pp = pp_group();
  auto tag = [&](pp::Pass pass, int micro, int dest_stage) {
    return ((pass == pp::Pass::forward ? 0 : 1) * m + micro) * S + dest_stage;
  };
  std::vector<std::pair<dist::Work, Tensor>> sends;  // kept alive until the step's end
  auto send = [&](const Tensor& t, int dest_stage, pp::Pass pass, int micro) {
    const int peer = dest_stage % p, tg = tag(pass, micro, dest_stage);
    if (peer == pp_rank) {  // a message to this same rank (p = 1 with v > 1) stays local
      local_mail[tg] = t;
      return;
    }
    sends.emplace_back(pp.send(t, peer, tg), t);
    report.messages += 1;
    report.message_bytes += static_cast<std::int64_t>(t.numel() * dtype_size(t.dtype()));
  };
  auto receive = [&](int my_stage, int from_stage, pp::Pass pass, int micro) {
    const int peer = from_stage % p, tg = tag(pass, micro, my_stage);
    if (peer == pp_rank) {
      auto it = local_mail.find(tg);
      MGPU_CHECK(it != local_mail.end(), "ParallelGpt: rank ", pp_rank, " waits for its own ",
                 pass == pp::Pass::forward ? "activation" : "gradient", " of micro-batch ", micro,
                 " that it has not made yet (the schedule runs it too early)");
      Tensor t = it->second;
      local_mail.erase(it);
      return t;
    }
    Tensor t = Tensor::empty({b, T_act, C}, dtype, device);
    pp.recv(t, peer, tg).wait();
    return t;
  };
  const auto step_start = Clock::now();
  auto at = [&](Clock::time_point t) { return std::chrono::duration<double>(t - step_start).count(); };
  for (const pp::PipeOp& op : order) {
    const int s = pp::virtual_stage(p, pp_rank, op.chunk);
    nn::ContextScope scope(op.micro);
    auto micro_rows = [&](const Tensor& t) { return t.slice(op.micro * b, (op.micro + 1) * b).clone(); };
    auto micro_ids = [&](const HostIds& t) { return t.rows(op.micro * b, (op.micro + 1) * b); };
    Tensor x;
    Clock::time_point start;
    if (op.pass == pp::Pass::forward) {
      if (s == 0) {
        start = Clock::now();
        x = embed(micro_ids(ids_r));
      } else {
        x = receive(s, s - 1, pp::Pass::forward, op.micro);
        start = Clock::now();
      }
      measure_kept = op.micro == 0;
      x = chunk_forward(op.chunk, x);
      measure_kept = false;
      if (s == S - 1) {
        const Tensor logits = head_forward(op.micro, x);
        report.logits_bytes = logits.nbytes();
        add_(loss_sum, loss(op.micro, logits, micro_rows(targets_r)));
      }
      report.ops.push_back({op, at(start), at(Clock::now())});
      if (s != S - 1) send(x, s + 1, pp::Pass::forward, op.micro);
    } else {
      if (s == S - 1) {
        start = Clock::now();
        x = head_backward(op.micro, Tensor());
      } else {
        x = receive(s, s + 1, pp::Pass::backward, op.micro);
        start = Clock::now();
      }
      x = chunk_backward(op.chunk, x);
      if (s == 0) embed_backward(x);
      report.ops.push_back({op, at(start), at(Clock::now())});
      if (s != 0) send(x, s - 1, pp::Pass::backward, op.micro);
    }
  }
  for (auto& [work, t] : sends) work.wait();
  for (const OpTime& o : report.ops) report.busy_s += o.end_s - o.start_s;
  report.span_s = report.ops.empty() ? 0.0 : report.ops.back().end_s;
  report.backward_peak_bytes = step_peak(*this, device, step.base);
  // The tied table: the first stage's lookup gradient plus the last stage's head gradient,
  // the sum sent back, so both copies take the same update.
  if (p > 1 && (first || last)) {
    const int tied_tag = 32767;
    if (last) {
      Tensor& g = head->parameter("weight").grad;
      pp.send(g, 0, tied_tag).wait();
      pp.recv(g, 0, tied_tag).wait();
    } else {
      Tensor& g = wte->parameter("weight").grad;
      Tensor other = Tensor::empty(g.shape(), g.dtype(), g.device());
      pp.recv(other, p - 1, tied_tag).wait();
      add_(g, other);
      pp.send(g, p - 1, tied_tag).wait();
    }
    const Tensor& g = (last ? head : wte)->parameter("weight").grad;
    report.messages += 1;
    report.message_bytes += static_cast<std::int64_t>(g.numel() * dtype_size(dtype));
  }
  // The loss lives on the last stage: one broadcast over the pipeline, then the mean over
  // the data group, whose gradients are averaged in one all-reduce of their concatenation.
  Tensor& loss = loss_sum;
  scale_(loss, 1.0 / m);
  if (p > 1) pp.broadcast(loss, p - 1).wait();
  dist::ProcessGroup& data = data_group();
  if (!moes.empty()) {  // one stage, one micro-batch (GptPlan::check_experts)
    // The loss and the auxiliary losses averaged together; the gradients reduced as lesson
    // 16 says; the biases updated from the step's load (moe_step.cpp).
    Tensor both = Tensor::from_vector(std::vector<double>{0.0, moe_aux_loss()}, {2}, device);
    Tensor ce = both.slice(0, 1);
    copy_(ce, loss);
    reduce_moe_grads();
    if (data.size() > 1) data.all_reduce(both, dist::ReduceOp::avg).wait();
    update_moe_biases();
    const std::vector<double> values = both.to_vector<double>();  // the step's one host read
    report.loss = values[0];
    report.aux_loss = values[1];
    finish_step(*this, device, step, report);
    return report;
  }
  if (data.size() > 1) {
    std::vector<std::string> names;
    for (const auto& [name, param] : parts->named_parameters()) names.push_back(name);
    tp::all_reduce_replicated_grads(*parts, names, data);  // one all-reduce
    for (nn::Parameter* param : parts->parameters()) scale_(param->grad, 1.0 / data.size());
    data.all_reduce(loss, dist::ReduceOp::avg).wait();
  }
  reduce_replicated_grads();
  report.loss = loss.to_vector<double>()[0];  // the step's one host read
  finish_step(*this, device, step, report);
  return report;
}

}  // namespace mgpu::parallel::gpt
