// train: lesson 14's program. gpt-tiny (lesson 12) under a context-parallel plan of the
// library's one GPT (mgpu/parallel/gpt/): each rank of a group of --cp ranks holds the whole
// model and its own positions of every window (plain blocks, or with --split zigzag a head
// and a tail chunk); attention is --cp-kind: ring attention (tasks 1-4), the all-gather-K/V
// baseline, Ulysses' all-to-alls (task 5), or the hybrid (Ulysses inside groups of
// --ulysses-size consecutive CP ranks, the ring across them). More ranks: data
// parallelism across the CP groups (replica d reads batch s·D + d), CP and DP reduced
// together by lesson 05's DDP over the ranks that hold the same parameters (Megatron-LM's
// way). --tp N: each CP rank is N ranks of lesson 13's tensor
// parallelism, the ring on this TP rank's heads. --check (the default) trains the unsplit
// nn::GPT too: in f64 the losses agree to about 1e-15, in f32 to 1e-7. Each step prints the
// bytes this rank sent by kind beside the chapter's formulas (§7a), the first what it keeps.
//
//   tools/mpirun -np 2 build/solutions/14_context_parallel/train --cp 2 --steps 10 [--device cuda]
//   tools/mpirun -np 4 build/solutions/14_context_parallel/train --cp 2 --steps 10   (2 CP x 2 DP)
//   tools/mpirun -np 8 build/solutions/14_context_parallel/train --tp 2 --cp 2 --steps 10
//   tools/mpirun -np 4 build/solutions/14_context_parallel/train --cp 4 --cp-kind hybrid --steps 10
//   tools/mpirun -np 4 build/solutions/14_context_parallel/train --seq 1024 --batch-size 1 --steps 3 --no-check
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/app/clock.h"
#include "mgpu/app/cp_report.h"
#include "mgpu/app/gpt_program.h"
#include "mgpu/dist/dist.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"

namespace {

using namespace mgpu;
namespace cp = mgpu::parallel::cp;
namespace gpt = mgpu::parallel::gpt;

struct Flags : app::GptProgramFlags {
  std::string split = "zigzag";
  int cp = 0;  // 0: every rank (no data parallelism)
  int tp = 1;  // tensor-parallel ranks inside each CP rank
  std::string cp_kind = "ring";  // ring, allgather, ulysses or hybrid
  int ulysses_size = 0;          // hybrid: ranks of a Ulysses group (0: the plan's default)
};

int train(const Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::shared_ptr<dist::ProcessGroup> world = app::quiet_cpu_group();
  const app::GptPlace at = app::place_gpt_ranks(f);  // --device, --backend
  const int W = world->size(), TP = f.tp;
  MGPU_CHECK(TP >= 1 && W % TP == 0, "--tp ", TP, " does not divide the ", W, " rank(s)");
  const int P = f.cp == 0 ? W / TP : f.cp;
  MGPU_CHECK(P >= 1 && W % (P * TP) == 0, "--cp ", P, " x --tp ", TP, " does not divide the ", W,
             " rank(s); start a multiple of their product (tools/mpirun -np N)");
  const int D = W / (P * TP);
  // Step 1) the plan: TP inside, CP across (world rank (d·P + c)·TP + t), DP outside; the
  // tables and the head whole on every rank, DDP over the CP x DP ranks of a TP position.
  gpt::GptPlan plan;
  plan.shape = parallel::grid::GridShape{D, TP, 1, P};
  plan.split = f.split == "plain" ? cp::Split::plain : cp::Split::zigzag;
  plan.attention = gpt::attention_from_name(f.cp_kind);
  plan.ulysses_size = f.ulysses_size;  // refused by the plan's check without the hybrid
  plan.embedding = plan.head = gpt::Vocab::replicated;
  plan.grad_sync = gpt::GradSync::ddp;
  const parallel::grid::ProcessGrid g(plan.shape, at.backend, at.device);
  // This rank's positions: refused here, on every rank, when --seq does not split.
  const auto Tr = static_cast<std::int64_t>(cp::sequence_positions(f.seq, P, g.coords().cp, plan.split).size());
  // Step 2) the data, the unsplit model, this rank's part of it, the optimizers.
  const data::TextCorpus corpus = app::open_gpt_corpus(f);
  const data::TextLoader loader(corpus.train, f.batch, f.seq, f.seed);
  auto full = app::make_full_gpt(f, corpus, at.device);
  gpt::ParallelGpt model(*full, plan, g);
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model.parameters(), adam);
  app::OneProcessCheck check(*full, adam, f.check);
  const nn::GPTConfig& config = full->config();
  const int U = plan.ulysses_size_for(config);  // hybrid: Ulysses over U, the ring over P/U
  const std::string kind = f.cp_kind + (f.cp_kind != "hybrid" ? "" : " (Ulysses " + std::to_string(U) + " x ring " + std::to_string(P / U) + ")");
  if (world->rank() == 0)
    std::printf("lesson 14: gpt-tiny (%s) over %d rank(s): %d-way tensor parallel x %d-way "
                "context parallel x %d data-parallel replica(s); T = %lld cut %s into %lld "
                "positions per rank, attention %s%s, %s, %s\n", config.str().c_str(), W, TP, P, D,
                static_cast<long long>(f.seq), cp::split_name(plan.split), static_cast<long long>(Tr),
                kind.c_str(), D * P > 1 ? ", gradients by DDP over each CP x DP group" : "",
                f.dtype.c_str(), corpus.source.c_str());
  double loss = 0.0, step_s = 0.0;
  const std::size_t value_bytes = dtype_size(f.value_dtype());
  for (std::int64_t s = 0; s < f.steps; ++s) {
    // Step 3) replica d reads batch s·D + d; each rank trains on its own positions of it.
    const data::TextBatch batch = at.batch(loader, s * D + g.coords().dp);
    const double t0 = app::now_s();
    const gpt::StepReport rep = model.train_step(batch);
    loss = rep.loss;
    optimizer.step();
    const double dt = app::now_s() - t0;
    if (s > 0 || f.steps == 1) step_s += dt;  // the first step warms the caches
    check.step(loader, s * D, D, loss);  // the unsplit model on all D batches
    // Step 4) what the step kept, computed and sent, beside the chapter's formulas.
    const std::string first = s == 0 ? app::cp_first_step_lines(model, rep, f.batch, f.seq, value_bytes) : "";
    if (world->rank() != 0) continue;
    if (!first.empty()) std::printf("%s\n", first.c_str());
    std::printf("step %lld loss %.6f%s collectives CP %lld TP %lld DDP %lld step %.3f s, %.0f tokens/s, "
                "peak step memory %.1f KiB, host reads %lld (rank 0)\n%s\n", static_cast<long long>(s), loss,
                check.step_text(loss).c_str(), static_cast<long long>(rep.by_group.cp),
                static_cast<long long>(rep.by_group.tp), static_cast<long long>(rep.by_group.data), dt,
                static_cast<double>(D * f.batch * f.seq) / dt, static_cast<double>(rep.backward_peak_bytes) / 1024.0,
                static_cast<long long>(rep.host_reads), app::cp_traffic_line(model, rep, f.batch, f.seq, value_bytes).c_str());
  }
  const std::vector<std::size_t> buckets = model.ddp_bucket_bytes();  // after the rebuild
  if (!buckets.empty() && world->rank() == 0)
    std::printf("%s\n", app::ddp_buckets_line("each CP x DP group (" + std::to_string(g.data_group().size()) +
                                              " ranks)", buckets).c_str());
  // The attention core's CPU seconds per rank of this CP group: the load balance in time.
  const std::string seconds = app::cp_core_seconds_line(model);
  const std::int64_t timed = f.steps > 1 ? f.steps - 1 : 1;
  if (world->rank() == 0)
    std::printf("%s\ntokens/s over steps 1..%lld: %.0f\n%s\n", seconds.c_str(), static_cast<long long>(timed),
                static_cast<double>(D * f.batch * f.seq * timed) / std::max(step_s, 1e-9), check.final_line(loss).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App cli{"Lesson 14: train gpt-tiny with its sequence split over groups of --cp ranks (ring "
               "attention), data parallelism across them (tools/mpirun -np N), beside the unsplit model."};
  app::add_gpt_program_flags(cli, f, "windows per step", "tokens per window (T): a multiple of the ranks "
                             "(plain) or of twice the ranks (zigzag); beyond 128 the position table grows");
  cli.add_option("--cp", f.cp, "ranks of each context-parallel group (consecutive ranks); the rest of the "
                 "ranks are data-parallel replicas (0: every rank, one group)")->check(app::non_negative_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--tp", f.tp, "tensor-parallel ranks inside each CP rank (consecutive; they divide the 4 "
                 "heads): lesson 13's split, the ring on this TP rank's heads")->check(app::positive_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--split", f.split, "plain or zigzag")->check(CLI::IsMember({"plain", "zigzag"}))->capture_default_str();
  cli.add_option("--cp-kind", f.cp_kind, "the attention core: ring (tasks 1-4), allgather (K and V "
                 "all-gathered, the baseline), ulysses (task 5's all-to-alls; TP x CP must divide the 4 heads) "
                 "or hybrid (Ulysses inside, the ring across)")->check(CLI::IsMember({"ring", "allgather", "ulysses", "hybrid"}))->capture_default_str();
  cli.add_option("--ulysses-size", f.ulysses_size, "hybrid: the ranks U of each Ulysses group (consecutive CP "
                 "ranks; U divides --cp, TP x U the heads); 0: the largest U below --cp that does")->check(app::non_negative_integer(app::kMaxGridExtent))->capture_default_str();
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
