// Lesson 16's program's lines about its experts (moe_report.h).
#include "mgpu/app/moe_report.h"

#include <algorithm>
#include <cstdio>

namespace mgpu::app {

std::string ExpertLoad::str() const {
  std::string out;
  for (std::size_t l = 0; l < per_layer.size(); ++l) {
    out += " [";
    for (std::size_t e = 0; e < per_layer[l].size(); ++e)
      out += (e ? " " : "") + std::to_string(per_layer[l][e]);
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "] max/mean %.2f", max_over_mean[l]);
    out += ratio;
  }
  return out;
}

ExpertLoad gather_expert_load(const std::vector<parallel::moe::MoE*>& layers, bool counts,
                              double step_s, dist::ProcessGroup& world) {
  const std::size_t L = layers.size();
  const std::size_t E = L ? layers[0]->stats().routed_per_expert.size() : 0;
  // Every expert's choices, then the dropped ones last: one all-reduce for all of them.
  std::vector<std::int64_t> flat(L * E + 1, 0);
  for (std::size_t l = 0; l < L && counts; ++l) {
    const parallel::moe::MoEStats& s = layers[l]->stats();
    std::copy(s.routed_per_expert.begin(), s.routed_per_expert.end(), flat.begin() + l * E);
    flat.back() += s.dropped;
  }
  Tensor summed = Tensor::from_vector(flat, {static_cast<std::int64_t>(flat.size())});
  Tensor slowest = Tensor::from_vector(std::vector<double>{step_s}, {1});
  world.all_reduce(summed, dist::ReduceOp::sum).wait();
  world.all_reduce(slowest, dist::ReduceOp::max).wait();
  flat = summed.to_vector<std::int64_t>();
  ExpertLoad load;
  load.dropped = flat.back();
  load.slowest_step_s = slowest.to_vector<double>()[0];
  for (std::size_t l = 0; l < L; ++l) {
    std::vector<std::int64_t> mine(flat.begin() + l * E, flat.begin() + (l + 1) * E);
    double mean = 0;
    for (std::int64_t c : mine) mean += static_cast<double>(c) / static_cast<double>(E);
    const double most = static_cast<double>(*std::max_element(mine.begin(), mine.end()));
    load.max_over_mean.push_back(mean > 0 ? most / mean : 0.0);
    load.per_layer.push_back(std::move(mine));
  }
  return load;
}

nlohmann::json expert_load_json(std::int64_t step, double loss, double aux_loss,
                                const ExpertLoad& load, double tokens_per_s,
                                std::int64_t ep_collectives) {
  return {{"step", step},
          {"train_loss", loss},
          {"aux_loss", aux_loss},
          {"load", load.per_layer},
          {"max_over_mean", load.max_over_mean},
          {"dropped", load.dropped},
          {"tokens_per_s", tokens_per_s},
          {"ep_collectives", ep_collectives}};
}

std::string moe_memory_line(std::int64_t held, const parallel::gpt::MoEParameterCount& formula,
                            int ep, std::size_t value_bytes) {
  const double kib = static_cast<double>(value_bytes) / 1024.0;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "memory: rank 0 holds %lld parameters (%.1f KiB); formula (TP 1) dense + "
                "experts/EP = %lld + %lld/%d = %lld (%.1f KiB); one process %lld",
                static_cast<long long>(held), static_cast<double>(held) * kib,
                static_cast<long long>(formula.dense), static_cast<long long>(formula.experts),
                ep, static_cast<long long>(formula.per_rank(ep)),
                static_cast<double>(formula.per_rank(ep)) * kib,
                static_cast<long long>(formula.per_rank(1)));
  return buf;
}

}  // namespace mgpu::app
