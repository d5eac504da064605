// train: lesson 15's program. gpt-tiny (lesson 12) on a DP x TP x PP grid, a plan applied
// to the library's one GPT (mgpu/parallel/gpt/): --pp pipeline stages (send/recv of
// activations and gradients under GPipe, 1F1B or interleaved 1F1B with --virtual chunks),
// --tp ranks of lesson 13's tensor parallelism inside each stage, --dp replicas averaging
// their gradients after the backward. Replica d reads windows [d·B/DP, (d+1)·B/DP) of the
// global batch s in --micro micro-batches, so every layout trains one process's model; with
// --check (the default) every rank trains the unsplit nn::GPT too and prints both losses.
// --save DIR / --load DIR: a sharded checkpoint that loads on any layout (gpt_checkpoint.h).
//
//   tools/mpirun -np 8 build/solutions/15_3d_parallel/train --dp 2 --tp 2 --pp 2 --steps 10 [--device cuda]
//   tools/mpirun -np 4 build/solutions/15_3d_parallel/train --pp 4 --schedule interleaved --virtual 1
//   tools/mpirun -np 4 build/solutions/15_3d_parallel/train --dp 2 --tp 2 --save /tmp/ck --steps 5
//   tools/mpirun -np 4 build/solutions/15_3d_parallel/train --pp 2 --dp 2 --load /tmp/ck --steps 5
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/app/gpt_program.h"
#include "mgpu/app/gpt_resume.h"
#include "mgpu/dist/dist.h"
#include "mgpu/parallel/gpt/gpt_checkpoint.h"

namespace {

using namespace mgpu;
namespace grid = mgpu::parallel::grid;
namespace gpt = mgpu::parallel::gpt;
namespace pp = mgpu::parallel::pp;

struct Flags : app::GptProgramFlags {
  int dp = 1, tp = 1, pp = 1, virtual_stages = 1, micro = 0;
  std::string schedule = "1f1b", save, load;
};

int train(const Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::shared_ptr<dist::ProcessGroup> world = app::quiet_cpu_group();
  const app::GptPlace at = app::place_gpt_ranks(f);  // --device, --backend
  // Step 1) the plan: the grid's extents, the schedule, the micro-batches.
  gpt::GptPlan plan;
  plan.shape = grid::GridShape{f.dp, f.tp, f.pp};
  grid::check_grid(plan.shape, world->size());
  app::check_save_folder(f.save, f.load);
  plan.schedule = pp::parse_schedule(f.schedule);
  plan.virtual_stages = f.virtual_stages;
  plan.micro_batches = f.micro > 0 ? f.micro : 2 * f.pp;
  const int rank = world->rank(), D = f.dp, m = plan.micro_batches;
  MGPU_CHECK(f.batch % D == 0 && (f.batch / D) % m == 0, "--batch-size ", f.batch, " windows over ",
             D, " replica(s) of ", m, " micro-batch(es): DP x micro-batches must divide it");
  // Step 2) the data, the unsplit model, this rank's part of it and the optimizers.
  const data::TextCorpus corpus = app::open_gpt_corpus(f);
  const data::TextLoader loader(corpus.train, f.batch, f.seq, f.seed);  // the global batch
  auto full = app::make_full_gpt(f, corpus, at.device);
  const grid::ProcessGrid g(plan.shape, at.backend, at.device);
  gpt::ParallelGpt model(*full, plan, g);
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model.parameters(), adam);
  app::OneProcessCheck check(*full, adam, f.check);
  // Step 3) resume from a checkpoint saved on any layout.
  std::int64_t first_step = 0;
  if (!f.load.empty()) {
    MGPU_CHECK(!f.check, "--load continues the split model only: add --no-check");
    const gpt::LoadedCheckpoint ck = gpt::load_checkpoint(f.load, model, optimizer);  // verified
    const app::GptResume resumed = app::gpt_resume_checks(ck.index.metadata, f, f.load, ck.stats.unverified_chunks);  // the run's flags
    first_step = resumed.step;
    if (rank == 0)
      std::printf("loaded %s (saved by %d ranks, %s): step %lld; rank 0 read %lld bytes from %lld "
                  "file(s)%s%s\n", f.load.c_str(), ck.index.world_size, resumed.layout.c_str(),
                  static_cast<long long>(first_step), static_cast<long long>(ck.stats.bytes_read),
                  static_cast<long long>(ck.stats.files_opened), resumed.note.empty() ? "" : "\n  ", resumed.note.c_str());
  }
  const std::int64_t params = model.num_parameters();
  if (rank == 0) {
    std::printf("lesson 15: gpt-tiny (%s) on %s = %d rank(s), %s schedule, %d chunk(s) per rank, "
                "%d micro-batch(es) of %lld window(s), %s, %s\n", full->config().str().c_str(),
                plan.shape.str().c_str(), plan.shape.size(), f.schedule.c_str(), f.virtual_stages, m,
                static_cast<long long>(f.batch / D / m), f.dtype.c_str(), corpus.source.c_str());
    std::string chunks;
    for (const auto& r : model.chunk_blocks())
      chunks += " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
    std::printf("rank 0: blocks%s; parameters %lld of %lld (%.1f KiB of weights, gradients and "
                "AdamW moments); schedule bubble (p-1)/(v·m) = %.3f\n", chunks.c_str(),
                static_cast<long long>(params), static_cast<long long>(full->num_parameters()),
                4.0 * static_cast<double>(params * static_cast<std::int64_t>(dtype_size(f.value_dtype()))) / 1024.0,
                pp::bubble_formula(f.pp, f.virtual_stages, m));
  }
  double loss = 0.0;
  const std::int64_t rows = f.batch / D;
  for (std::int64_t s = first_step; s < first_step + f.steps; ++s) {
    // Step 4) this replica's windows of the global batch through the pipeline, AdamW.
    const data::TextBatch batch = at.batch(loader, s);
    const auto started = std::chrono::steady_clock::now();
    const std::int64_t r0 = g.coords().dp * rows;
    const gpt::StepReport rep = model.train_step(batch.rows(r0, r0 + rows));
    loss = rep.loss;
    optimizer.step();
    const double step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    check.step({batch}, loss);  // the unsplit model on the whole batch
    // Step 5) across the ranks (not part of the step): the largest peak memory, the bubble
    // on the wall clock over the pipeline ranks.
    Tensor stats = Tensor::from_vector(std::vector<double>{static_cast<double>(rep.peak_bytes),
                                                           rep.span_s - rep.busy_s, rep.busy_s}, {3});
    Tensor peak = stats.slice(0, 1), times = stats.slice(1, 3);
    world->all_reduce(peak, dist::ReduceOp::max).wait();
    world->all_reduce(times, dist::ReduceOp::sum).wait();
    const std::vector<double> v = stats.to_vector<double>();
    if (rank == 0)
      std::printf("step %lld loss %.6f%s | %.0f ms; rank 0: %lld collectives, %lld sends (%.1f KiB), %lld host reads, "
                  "peak step memory %.1f KiB; largest peak %.1f KiB; bubble measured %.3f\n",
                  static_cast<long long>(s), loss, check.step_text(loss).c_str(), step_ms,
                  static_cast<long long>(rep.collectives), static_cast<long long>(rep.messages),
                  static_cast<double>(rep.message_bytes) / 1024.0, static_cast<long long>(rep.host_reads),
                  static_cast<double>(rep.peak_bytes) / 1024.0, v[0] / 1024.0, v[1] / v[2]);
  }
  if (!f.save.empty()) {  // Step 6) every rank its slices, rank 0 the index
    const std::string index = gpt::save_checkpoint(*world, f.save, model, optimizer,
        app::gpt_checkpoint_metadata(f, first_step + f.steps, plan.shape.str()));
    if (rank == 0) std::printf("saved %s (step %lld)\n", index.c_str(), static_cast<long long>(first_step + f.steps));
  }
  if (rank == 0) std::printf("%s\n", check.final_line(loss).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.batch = 8;
  CLI::App cli{"Lesson 15: train gpt-tiny on a DP x TP x PP grid of the ranks started with "
               "tools/mpirun -np DP·TP·PP, beside the unsplit model."};
  app::add_gpt_program_flags(cli, f, "windows per step, over all replicas", "tokens per window (T)");
  cli.add_option("--dp", f.dp, "data-parallel replicas")->check(app::positive_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--tp", f.tp, "ranks of each tensor-parallel group (divides the 4 heads)")->check(app::positive_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--pp", f.pp, "pipeline stages")->check(app::positive_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--schedule", f.schedule, "gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))->capture_default_str();
  cli.add_option("--virtual", f.virtual_stages, "model chunks per pipeline rank (interleaved)")->check(app::positive_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--micro", f.micro, "micro-batches per step (0: 2·PP)")->check(app::non_negative_integer(app::kMaxGridExtent))->capture_default_str();
  cli.add_option("--save", f.save, "write a sharded checkpoint here after the last step");
  cli.add_option("--load", f.load, "start from a sharded checkpoint saved on any layout");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
