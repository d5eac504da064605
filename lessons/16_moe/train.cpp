// train: lesson 16's program. gpt-tiny-moe (lesson 12's GPT, every other block's MLP a
// Mixture of Experts: mgpu/parallel/gpt/moe_gpt.h) on --dp data-parallel ranks whose
// experts are split over EP groups of --ep consecutive ranks (--tp splits attention, the MoE
// then runs whole on each TP rank): a plan applied to the one GPT.
// Rank d reads windows [d·B/DP, (d+1)·B/DP) of the global batch. With --check every rank
// also trains one process's model on each rank's windows in turn and prints both losses:
// capacity counts one forward's tokens, so one process drops what each rank drops.
//
//   tools/mpirun -np 4 build/solutions/16_moe/train --ep 4 --steps 10
//   tools/mpirun -np 4 build/solutions/16_moe/train --ep 2 --balance bias --metrics load.jsonl
//   tools/mpirun -np 2 build/solutions/16_moe/train --ep 2 --dtype f64 --capacity-factor 0 --steps 3
//   tools/mpirun -np 4 build/solutions/16_moe/train --tp 2 --ep 2 --data shakespeare
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "mgpu/app/app.h"
#include "mgpu/app/gpt_program.h"
#include "mgpu/dist/dist.h"
#include "mgpu/parallel/gpt/moe_gpt.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"

namespace {

using namespace mgpu;
namespace grid = mgpu::parallel::grid;
namespace gpt = mgpu::parallel::gpt;

struct Flags : app::GptProgramFlags {
  int dp = 0, tp = 1, ep = 1;
  gpt::MoEGptConfig moe = gpt::MoEGptConfig::tiny();
  std::string balance = "aux", metrics;
};

int train(Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::shared_ptr<dist::ProcessGroup> world = app::quiet_cpu_group();
  const app::GptPlace at = app::place_gpt_ranks(f);  // --device, --backend
  // Step 1) the plan: DP ranks, EP groups of consecutive ones; the experts' routing.
  gpt::GptPlan plan;
  const int D = f.dp > 0 ? f.dp : world->size() / f.tp, rank = world->rank();
  plan.shape = grid::GridShape{D, f.tp};
  plan.shape.ep = f.ep;
  grid::check_grid(plan.shape, world->size());
  const gpt::MoEGptConfig moe = f.moe.balanced(gpt::parse_balance(f.balance));
  MGPU_CHECK(f.batch % D == 0, "--batch-size ", f.batch, " windows over ", D, " replicas: DP must divide it");  // Step 2) the data, the one model with its experts, this rank's part, the optimizers.
  const data::TextCorpus corpus = app::open_gpt_corpus(f);
  const data::TextLoader loader(corpus.train, f.batch, f.seq, f.seed);  // the global batch
  auto full = app::make_full_gpt(f, corpus, at.device);
  gpt::use_experts(*full, moe);
  const grid::ProcessGrid g(plan.shape, at.backend, at.device);
  gpt::ParallelGpt model(*full, plan, g);
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model.parameters(), adam);
  app::OneProcessCheck check(*full, adam, f.check);
  const std::vector<parallel::moe::MoE*> layers = model.moe_layers();
  const auto L = static_cast<std::int64_t>(layers.size()), E = moe.experts;
  const std::int64_t rows = f.batch / D;
  if (rank == 0)
    std::printf("lesson 16: gpt-tiny-moe (%s; %s) on %s = %d rank(s), %lld window(s) of %lld per rank, %s, %s%s\n",
                full->config().str().c_str(), moe.str().c_str(), plan.shape.str().c_str(), plan.shape.size(),
                static_cast<long long>(rows), static_cast<long long>(f.seq), f.dtype.c_str(), corpus.source.c_str(),
                f.check ? "; --check: one process on each rank's windows" : "");
  std::ofstream metrics(rank == 0 ? f.metrics : std::string());  // open where named, on rank 0
  double loss = 0.0;
  for (std::int64_t s = 0; s < f.steps; ++s) {
    // Step 3) this rank's windows through the model, AdamW; the bias updated in the step.
    const data::TextBatch batch = at.batch(loader, s);
    const auto started = std::chrono::steady_clock::now();
    const gpt::StepReport rep = model.train_step(batch.rows(g.coords().dp * rows, (g.coords().dp + 1) * rows));
    optimizer.step();
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    loss = rep.loss;
    if (check.on()) {  // one process on every rank's windows, one after the other
      std::vector<data::TextBatch> each;
      for (int d = 0; d < D; ++d) each.push_back(batch.rows(d * rows, (d + 1) * rows));
      check.step(each, loss);
      gpt::update_expert_biases(*full);
    }
    // Step 4) across the ranks (not part of the step): the load of every expert of every
    // layer and the dropped choices over the TP rank 0 replicas, the slowest rank's time.
    std::vector<std::int64_t> counts(static_cast<std::size_t>(L * E + 1), 0);
    for (std::int64_t i = 0; i < L * E && g.coords().tp == 0; ++i)
      counts[i] = layers[i / E]->stats().routed_per_expert[i % E];
    for (std::int64_t l = 0; l < L && g.coords().tp == 0; ++l) counts.back() += layers[l]->stats().dropped;
    Tensor summed = Tensor::from_vector(counts, {static_cast<std::int64_t>(counts.size())});
    Tensor slowest = Tensor::from_vector(std::vector<double>{step_s}, {1});
    world->all_reduce(summed, dist::ReduceOp::sum).wait();
    world->all_reduce(slowest, dist::ReduceOp::max).wait();
    counts = summed.to_vector<std::int64_t>();
    const double tokens_per_s = static_cast<double>(f.batch * f.seq) / slowest.to_vector<double>()[0];
    if (rank != 0) continue;
    std::string load;
    nlohmann::json per_layer = nlohmann::json::array(), ratios = nlohmann::json::array();
    for (std::int64_t l = 0; l < L; ++l) {
      const std::vector<std::int64_t> mine(counts.begin() + l * E, counts.begin() + (l + 1) * E);
      double total = 0;
      for (std::int64_t c : mine) total += static_cast<double>(c) / static_cast<double>(E);
      const double ratio = static_cast<double>(*std::max_element(mine.begin(), mine.end())) / total;
      load += " [";
      for (std::int64_t e = 0; e < E; ++e) load += (e ? " " : "") + std::to_string(mine[static_cast<std::size_t>(e)]);
      load += "] max/mean " + std::to_string(ratio).substr(0, 4);
      per_layer.push_back(mine);
      ratios.push_back(ratio);
    }
    std::printf("step %lld loss %.6f aux %.5f%s | load%s | dropped %lld | %lld EP all-to-alls | %.0f tokens/s\n",
                static_cast<long long>(s), loss, rep.aux_loss, check.step_text(loss).c_str(), load.c_str(),
                static_cast<long long>(counts.back()), static_cast<long long>(rep.by_group.ep), tokens_per_s);
    if (metrics.is_open())
      metrics << nlohmann::json{{"step", s}, {"train_loss", loss}, {"aux_loss", rep.aux_loss},
                                {"load", per_layer}, {"max_over_mean", ratios}, {"dropped", counts.back()},
                                {"tokens_per_s", tokens_per_s}, {"ep_collectives", rep.by_group.ep},
                                {"world_size", world->size()}, {"balance", f.balance}}.dump() << "\n";
  }
  // Step 5) memory per rank: the parameters this rank holds against the formula.
  const gpt::MoEParameterCount n = gpt::moe_parameter_count(full->config(), moe);
  const double kib = static_cast<double>(dtype_size(f.value_dtype())) / 1024.0;
  if (rank == 0)
    std::printf("memory: rank 0 holds %lld parameters (%.1f KiB); formula (TP 1) dense + experts/EP = %lld + %lld/%d = %lld "
                "(%.1f KiB); one process %lld\n%s\n", static_cast<long long>(model.num_parameters()),
                static_cast<double>(model.num_parameters()) * kib, static_cast<long long>(n.dense),
                static_cast<long long>(n.experts), f.ep, static_cast<long long>(n.per_rank(f.ep)),
                static_cast<double>(n.per_rank(f.ep)) * kib, static_cast<long long>(n.per_rank(1)), check.final_line(loss).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.batch = 8;
  CLI::App cli{"Lesson 16: train gpt-tiny-moe with its experts split over EP groups of data-parallel "
               "ranks (tools/mpirun -np DP), beside one process."};
  app::add_gpt_program_flags(cli, f, "windows per step, over all ranks", "tokens per window (T)");
  cli.add_option("--tp", f.tp, "ranks of each tensor-parallel group (attention's heads)")->check(app::positive_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--dp", f.dp, "data-parallel ranks (0: the world / TP)")->check(app::non_negative_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--ep", f.ep, "ranks of each EP group (consecutive data ranks; divides DP and E)")->check(app::positive_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--experts", f.moe.experts, "experts per MoE layer (E)")->check(app::positive_integer(1024))->capture_default_str();
  cli.add_option("--top-k", f.moe.k, "experts per token (k)")->check(app::positive_integer(1024))->capture_default_str();
  cli.add_option("--capacity-factor", f.moe.capacity_factor, "slots per expert over N·k/E (0: dropless)")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--balance", f.balance, "aux (the auxiliary loss), bias (DeepSeek-V3's bias) or none")
      ->check(CLI::IsMember({"aux", "bias", "none"}))->capture_default_str();
  cli.add_option("--metrics", f.metrics, "JSON lines, one per step: the load of every expert of every layer");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
