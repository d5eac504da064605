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
//   tools/mpirun -np 2 build/solutions/16_moe/train --ep 2 --dtype f64 --capacity-factor 0
//   tools/mpirun -np 4 build/solutions/16_moe/train --tp 2 --ep 2 --data shakespeare
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/app/gpt_program.h"
#include "mgpu/app/moe_report.h"
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
  MGPU_CHECK(f.batch % D == 0, "--batch-size ", f.batch, " windows over ", D,
             " replicas: DP must divide it");
  // Step 2) the data, the one model with its experts, this rank's part, the optimizer.
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
  const std::int64_t rows = f.batch / D;
  if (rank == 0)
    std::printf("lesson 16: gpt-tiny-moe (%s; %s) on %s = %d rank(s), %lld window(s) of %lld "
                "per rank, %s, %s%s\n", full->config().str().c_str(), moe.str().c_str(),
                plan.shape.str().c_str(), plan.shape.size(), static_cast<long long>(rows),
                static_cast<long long>(f.seq), f.dtype.c_str(), corpus.source.c_str(),
                f.check ? "; --check: one process on each rank's windows" : "");
  std::ofstream metrics(rank == 0 ? f.metrics : std::string());  // open where named, on rank 0
  double loss = 0.0;
  for (std::int64_t s = 0; s < f.steps; ++s) {
    // Step 3) this rank's windows through the model, AdamW; the bias updated in the step.
    const data::TextBatch batch = at.batch(loader, s);
    const auto started = std::chrono::steady_clock::now();
    const int d = g.coords().dp;
    const gpt::StepReport rep = model.train_step(batch.rows(d * rows, (d + 1) * rows));
    optimizer.step();
    const std::chrono::duration<double> step_s = std::chrono::steady_clock::now() - started;
    loss = rep.loss;
    if (check.on()) {  // one process on every rank's windows, one after the other
      std::vector<data::TextBatch> each;
      for (int r = 0; r < D; ++r) each.push_back(batch.rows(r * rows, (r + 1) * rows));
      check.step(each, loss);
      gpt::update_expert_biases(*full);
    }
    // Step 4) across the ranks (not part of the step): every expert's load, the dropped
    // choices, the slowest rank's time.
    const app::ExpertLoad load =
        app::gather_expert_load(model.moe_layers(), g.coords().tp == 0, step_s.count(), *world);
    const double tokens_per_s = static_cast<double>(f.batch * f.seq) / load.slowest_step_s;
    if (rank != 0) continue;
    std::printf("step %lld loss %.6f aux %.5f%s | load%s | dropped %lld | %lld EP all-to-alls | "
                "%.0f tokens/s\n", static_cast<long long>(s), loss, rep.aux_loss,
                check.step_text(loss).c_str(), load.str().c_str(),
                static_cast<long long>(load.dropped), static_cast<long long>(rep.by_group.ep),
                tokens_per_s);
    if (metrics.is_open())
      metrics << app::expert_load_json(s, loss, rep.aux_loss, load, tokens_per_s, rep.by_group.ep)
                     .dump() << "\n";
  }
  // Step 5) memory per rank: the parameters this rank holds against the formula.
  if (rank == 0)
    std::printf("%s\n%s\n", app::moe_memory_line(model.num_parameters(),
                                                  gpt::moe_parameter_count(full->config(), moe),
                                                  f.ep, dtype_size(f.value_dtype())).c_str(),
                check.final_line(loss).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.batch = 8;
  CLI::App cli{"Lesson 16: train gpt-tiny-moe with its experts split over EP groups of "
               "data-parallel ranks (tools/mpirun -np DP), beside one process."};
  app::add_gpt_program_flags(cli, f, "windows per step, over all ranks", "tokens per window (T)");
  const auto grid_extent = app::positive_integer(app::kMaxGridExtent);
  cli.add_option("--tp", f.tp, "ranks of each tensor-parallel group (attention's heads)")
      ->check(grid_extent)->capture_default_str();
  cli.add_option("--dp", f.dp, "data-parallel ranks (0: the world / TP)")
      ->check(app::non_negative_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--ep", f.ep, "ranks of each EP group (consecutive data ranks; divides DP and E)")
      ->check(grid_extent)->capture_default_str();
  cli.add_option("--experts", f.moe.experts, "experts per MoE layer (E)")
      ->check(app::positive_integer(1024))->capture_default_str();
  cli.add_option("--top-k", f.moe.k, "experts per token (k)")
      ->check(app::positive_integer(1024))->capture_default_str();
  cli.add_option("--capacity-factor", f.moe.capacity_factor,
                 "slots per expert over N*k/E (0: dropless)")
      ->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--balance", f.balance,
                 "aux (the auxiliary loss), bias (DeepSeek-V3's bias) or none")
      ->check(CLI::IsMember({"aux", "bias", "none"}))->capture_default_str();
  cli.add_option("--metrics", f.metrics,
                 "JSON lines, one per step: the load of every expert of every layer");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
