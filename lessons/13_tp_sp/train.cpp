// train: lesson 13's program. gpt-tiny (lesson 12) under a tensor-parallel plan of the
// library's one GPT (mgpu/parallel/gpt/): the blocks split over each TP group (attention by
// heads, the MLP by features; with --sp the LayerNorm regions cut along T), the token table
// split by vocabulary rows (padded to a multiple of the ranks), the head tied to them giving
// this rank's columns of the logits, and the loss the vocabulary-parallel cross-entropy
// (task 2): no rank ever holds the full B·T·V logits. With more ranks than --tp, data
// parallelism across the TP groups (lesson 11's grid): replica d reads batch s·D + d and
// lesson 05's DDP averages the gradients over each DP group while the backward runs; under
// SP the replicated parameters' partial gradients are then summed over the TP group (task
// 4). With --check (the default) every rank also trains the unsplit nn::GPT on the same
// batches and prints both losses: in f64 they agree to 2e-15, in f32 to about 1e-5.
//
//   tools/mpirun -np 2 build/solutions/13_tp_sp/train --tp 2 --data synthetic --steps 20 [--device cuda]
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --tp 4 --data synthetic --steps 20 --sp
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --tp 2 --steps 20 --sp   (2 TP x 2 DP)
//   tools/mpirun -np 2 build/solutions/13_tp_sp/train --data synthetic --steps 4 --dtype f64
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --steps 20 --sp --regather
//                                            (the column inputs all-gathered again in the backward)
#include <cstdio>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/app/gpt_program.h"
#include "mgpu/dist/dist.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace {

using namespace mgpu;
namespace gpt = mgpu::parallel::gpt;
namespace tpar = mgpu::parallel::tp;

struct Flags : app::GptProgramFlags {
  int tp = 0;  // 0: every rank (no data parallelism)
  bool sp = false, regather = false;
};

int train(const Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::shared_ptr<dist::ProcessGroup> world = app::quiet_cpu_group();
  const app::GptPlace at = app::place_gpt_ranks(f);  // --device, --backend
  const int W = world->size(), rank = world->rank(), P = f.tp == 0 ? W : f.tp;
  MGPU_CHECK(P >= 1 && W % P == 0, "--tp ", P, " does not divide the ", W,
             " rank(s); start a multiple of --tp ranks (tools/mpirun -np N)");
  const int D = W / P;
  // Step 1) the plan: TP inside groups of P consecutive ranks (SP, the re-gather), the
  // vocabulary split over them, DDP across them.
  gpt::GptPlan plan;
  plan.shape = parallel::grid::GridShape{D, P, 1};
  plan.sequence_parallel = f.sp;
  plan.regather = f.regather;
  plan.embedding = plan.head = gpt::Vocab::split;
  plan.grad_sync = gpt::GradSync::ddp;
  MGPU_CHECK(!f.sp || f.seq % P == 0, "--sp cuts T = ", f.seq, " over ", P, " ranks: it must divide it");
  // Step 2) the data, the unsplit model, this rank's part of it, the optimizers.
  const data::TextCorpus corpus = app::open_gpt_corpus(f);
  const data::TextLoader loader(corpus.train, f.batch, f.seq, f.seed);
  auto full = app::make_full_gpt(f, corpus, at.device);
  const parallel::grid::ProcessGrid g(plan.shape, at.backend, at.device);
  gpt::ParallelGpt model(*full, plan, g);  // throws when P does not divide the 4 heads
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model.parameters(), adam);
  app::OneProcessCheck check(*full, adam, f.check);
  const nn::GPTConfig& config = full->config();
  const std::int64_t Vp = tpar::padded_vocab(config.vocab_size, P);
  if (rank == 0) {
    std::printf("lesson 13: gpt-tiny (%s) over %d rank(s): %d-way tensor parallel%s x %d "
                "data-parallel replica(s)%s, %s, %s\n", config.str().c_str(), W, P,
                f.regather ? " + sequence parallel (inputs re-gathered in the backward)"
                : f.sp     ? " + sequence parallel" : "", D,
                D > 1 ? " (DDP over each DP group)" : "", f.dtype.c_str(), corpus.source.c_str());
    std::printf("vocabulary %lld padded to %lld (%lld padding row(s)), %lld rows per rank "
                "(embedding and head); parameters per rank %lld of %lld\n",
                static_cast<long long>(config.vocab_size), static_cast<long long>(Vp),
                static_cast<long long>(Vp - config.vocab_size), static_cast<long long>(Vp / P),
                static_cast<long long>(model.num_parameters()), static_cast<long long>(full->num_parameters()));
  }
  const std::size_t value_bytes = dtype_size(f.value_dtype());
  double loss = 0.0;
  for (std::int64_t s = 0; s < f.steps; ++s) {
    // Step 3) replica d reads batch s·D + d: D batches per step, as one process reading them
    // all. Forward, task 2's loss, backward (DDP's buckets during it), AdamW.
    const data::TextBatch batch = at.batch(loader, s * D + g.coords().dp);
    const gpt::StepReport rep = model.train_step(batch);
    loss = rep.loss;
    optimizer.step();
    check.step(loader, s * D, D, loss);  // the unsplit model on all D batches
    if (rank == 0) {
      const std::int64_t N = batch.inputs.numel();
      if (s == 0)
        std::printf("memory per rank (rank 0): logits %.1f KiB (N·Vp/P values; the full N·V "
                    "would be %.1f KiB), activations the blocks keep %.1f KiB (formula %.1f KiB)\n",
                    static_cast<double>(rep.logits_bytes) / 1024.0,
                    static_cast<double>(N * config.vocab_size * static_cast<std::int64_t>(value_bytes)) / 1024.0,
                    static_cast<double>(rep.kept_bytes) / 1024.0,
                    gpt::kept_bytes_formula(plan, config, batch.inputs.size(0), batch.inputs.size(1),
                                            config.n_layer, value_bytes) / 1024.0);
      std::printf("step %lld loss %.6f%s collectives TP %lld", static_cast<long long>(s), loss,
                  check.step_text(loss).c_str(), static_cast<long long>(rep.by_group.tp));
      if (D > 1) std::printf(" DP %lld", static_cast<long long>(rep.by_group.dp));
      std::printf(" peak step memory %.1f KiB, host reads %lld (rank 0; the unsplit model's step not "
                  "included)\n", static_cast<double>(rep.backward_peak_bytes) / 1024.0, static_cast<long long>(rep.host_reads));
    }
  }
  const std::vector<std::size_t> buckets = model.ddp_bucket_bytes();  // after the rebuild
  if (!buckets.empty() && rank == 0)
    std::printf("%s\n", app::ddp_buckets_line("each DP group", buckets).c_str());
  if (rank == 0) std::printf("%s\n", check.final_line(loss).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.steps = 20;
  CLI::App cli{"Lesson 13: train gpt-tiny with tensor parallelism inside groups of --tp ranks "
               "(it must divide the 4 heads), optionally with sequence parallelism, and data "
               "parallelism across them (start it with tools/mpirun -np N), beside the unsplit "
               "model."};
  app::add_gpt_program_flags(cli, f, "windows per step", "tokens per window (T); a multiple of the ranks with --sp");
  cli.add_option("--tp", f.tp, "ranks of each tensor-parallel group (consecutive ranks); it must "
                 "divide the ranks started, the rest are data-parallel replicas (0: every rank, "
                 "one group)")->check(app::non_negative_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_flag("--sp,!--no-sp", f.sp, "sequence parallelism in the LayerNorm regions");
  cli.add_flag("--regather", f.regather, "with --sp: keep only this rank's tokens of the column "
               "products' inputs and all-gather them again in the backward (Megatron-LM's)");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
