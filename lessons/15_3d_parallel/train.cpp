// train: lesson 15's program. gpt-tiny (lesson 12) on a DP x TP x PP grid of the ranks
// tools/mpirun starts: --pp pipeline stages (processes passing activations and their
// gradients with send/recv, under GPipe, 1F1B or interleaved 1F1B with --virtual chunks per
// rank), --tp ranks of lesson 13's tensor parallelism inside each stage, --dp replicas
// averaging their gradients (DDP's all-reduce). The global batch (--batch-size windows) is
// the same for every layout: replica d reads windows [d·B/DP, (d+1)·B/DP) of batch s and
// cuts them into --micro micro-batches, so every layout trains the same model on the same
// data as one process. With --check (the default) every rank also trains the unsplit
// nn::GPT on the whole batch and prints both losses.
//
//   tools/mpirun -np 8 build/solutions/15_3d_parallel/train --dp 2 --tp 2 --pp 2 --steps 10
//   tools/mpirun -np 4 build/solutions/15_3d_parallel/train --pp 4 --schedule interleaved --virtual 1
//   tools/mpirun -np 4 build/solutions/15_3d_parallel/train --dp 2 --tp 2 --save /tmp/ck --steps 5
//   tools/mpirun -np 4 build/solutions/15_3d_parallel/train --pp 2 --dp 2 --load /tmp/ck --steps 5
//
// --save DIR writes a sharded checkpoint after the last step (mgpu/io/sharded_checkpoint.h:
// each rank its own slices of the weights and AdamW's moments, an index naming them);
// --load DIR starts from one saved on any layout, at the step it was saved at.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/copy.h"
#include "mgpu/data/text.h"
#include "mgpu/dist/dist.h"
#include "mgpu/io/sharded_checkpoint.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/parallel/grid/grid.h"
#include "mgpu/parallel/pp/gpt_pipeline.h"

namespace {

using namespace mgpu;
namespace grid = mgpu::parallel::grid;
namespace pp = mgpu::parallel::pp;

struct Flags {
  std::string data = "synthetic";
  std::int64_t steps = 10, batch = 8, seq = 64;
  int dp = 1, tp = 1, pp = 1, virtual_stages = 1, micro = 0;
  std::string schedule = "1f1b";
  double lr = 1e-3;
  std::uint64_t seed = 1337;
  bool check = true;
  std::string dtype = "f32";
  std::string save, load;
};


bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// How this rank holds the tensor `local` of parameter `param` (or of its optimizer state)
// in the checkpoint: the unsplit model's name and shape, and its slice. c_attn's rows of
// one rank are three runs (its heads' q, k and v), one box of the tensor seen as [3, C, ...].
io::ShardedTensor checkpoint_shard(const std::string& param, const Tensor& local,
                                   const nn::GPTConfig& cfg, const grid::ProcessGrid& g) {
  const int P = g.shape().tp, r = g.coords().tp;
  const bool writer = g.coords().dp == 0;
  const std::int64_t C = cfg.n_embd;
  if (local.ndim() == 0) return io::replicated(local, writer && r == 0);  // AdamW's step
  if (ends_with(param, "attn.c_attn.weight"))
    return io::split_along(local.reshape({3, local.size(0) / 3, C}), {3, C, C}, 1, P, r, writer);
  if (ends_with(param, "attn.c_attn.bias"))
    return io::split_along(local.reshape({3, local.size(0) / 3}), {3, C}, 1, P, r, writer);
  if (ends_with(param, "attn.c_proj.weight")) return io::split_along(local, {C, C}, 1, P, r, writer);
  if (ends_with(param, "mlp.c_fc.weight")) return io::split_along(local, {4 * C, C}, 0, P, r, writer);
  if (ends_with(param, "mlp.c_fc.bias")) return io::split_along(local, {4 * C}, 0, P, r, writer);
  if (ends_with(param, "mlp.c_proj.weight")) return io::split_along(local, {C, 4 * C}, 1, P, r, writer);
  return io::replicated(local, writer && r == 0);
}

// Every tensor this rank holds under the checkpoint's names: the weights and AdamW's state.
// The last stage's copy of the tied table ("lm_head.weight") is the token table's: it is
// never written (the first stage writes it) and is read from the token table's entry.
io::ShardedDict checkpoint_dict(pp::GptPipeline& model, std::map<std::string, Tensor>& state,
                                const nn::GPTConfig& cfg, const grid::ProcessGrid& g, bool saving) {
  io::ShardedDict dict;
  for (const auto& [name, p] : model.named_parameters()) {
    const bool copy = name.rfind("lm_head.", 0) == 0;
    if (copy && saving) continue;
    const std::string stored = copy ? "transformer.wte.weight" : name;
    dict[stored] = checkpoint_shard(name, p->value, cfg, g);
    for (const char* key : {"exp_avg", "exp_avg_sq", "step"}) {
      // The optimizer keys its state by the parameter's own name.
      auto it = state.find(p->name() + "." + key);
      if (it == state.end()) {  // a load before any step: the state's shape, filled by the load
        it = state.emplace(p->name() + "." + key, std::string(key) == "step"
                                                 ? Tensor::zeros({}, DType::i64)
                                                 : Tensor::zeros(p->value.shape(), p->value.dtype())).first;
      }
      dict[stored + "." + key] = checkpoint_shard(name, it->second, cfg, g);
    }
  }
  return dict;
}

int train(const Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::shared_ptr<dist::ProcessGroup> world = app::quiet_cpu_group();
  const grid::GridShape shape{f.dp, f.tp, f.pp};
  grid::check_grid(shape, world->size());
  const grid::ProcessGrid g(shape);
  const int rank = world->rank(), D = f.dp;
  const pp::ScheduleKind kind = pp::parse_schedule(f.schedule);
  const int m = f.micro > 0 ? f.micro : 2 * f.pp;
  MGPU_CHECK(f.batch % D == 0 && (f.batch / D) % m == 0, "--batch-size ", f.batch, " windows over ",
             D, " replica(s) of ", m, " micro-batch(es): DP x micro-batches must divide it");
  const DType dtype = f.dtype == "f64" ? DType::f64 : DType::f32;
  const data::TextCorpus corpus = f.data == "synthetic" ? data::TextCorpus::synthetic(200000, f.seed)
                                  : f.data == "shakespeare" ? data::TextCorpus::load(data::TextCorpus::kDefaultPath)
                                                            : data::TextCorpus::load(f.data);
  const data::TextLoader loader(corpus.train, f.batch, f.seq, f.seed);  // the global batch
  const nn::GPTConfig config = nn::GPTConfig::tiny(corpus.tokenizer.vocab_size());
  MGPU_CHECK(f.seq <= config.block_size, "--seq ", f.seq, " exceeds gpt-tiny's block_size ", config.block_size);
  nn::manual_seed(f.seed);
  nn::GPT full(config);
  full.to(dtype);
  pp::GptPipeline model(full, g, pp::PipelineOptions{kind, f.virtual_stages, m});
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model.parameters(), adam);
  optim::AdamW full_optimizer(full.parameters(), adam);
  std::int64_t first_step = 0;
  if (!f.load.empty()) {
    const io::ShardedIndex index = io::read_sharded_index(f.load);
    std::map<std::string, Tensor> state;
    io::ShardedDict dict = checkpoint_dict(model, state, config, g, false);
    const io::ShardedLoadStats st = io::load_sharded(f.load, index, dict);
    optimizer.load_state(state);
    first_step = std::stoll(index.metadata.at("step"));
    MGPU_CHECK(index.metadata.at("batch_size") == std::to_string(f.batch), "--load ", f.load,
               " was saved with a global batch of ", index.metadata.at("batch_size"),
               " windows; resume with --batch-size ", index.metadata.at("batch_size"));
    MGPU_CHECK(!f.check, "--load continues the split model only: add --no-check");
    if (rank == 0)
      std::printf("loaded %s (saved at %s by %s ranks, %s): step %lld; rank 0 read %lld bytes "
                  "from %lld file(s)\n",
                  f.load.c_str(), index.metadata.at("step").c_str(),
                  std::to_string(index.world_size).c_str(), index.metadata.at("layout").c_str(),
                  static_cast<long long>(first_step), static_cast<long long>(st.bytes_read),
                  static_cast<long long>(st.files_opened));
  }
  const std::int64_t params = model.num_parameters();
  const std::size_t elem = dtype_size(dtype);
  if (rank == 0) {
    std::printf("lesson 15: gpt-tiny (%s) on %s = %d rank(s), %s schedule, %d chunk(s) per rank, "
                "%d micro-batch(es) of %lld window(s), %s, %s\n",
                config.str().c_str(), shape.str().c_str(), shape.size(), f.schedule.c_str(),
                f.virtual_stages, m, static_cast<long long>(f.batch / D / m), f.dtype.c_str(),
                corpus.source.c_str());
    std::string chunks;
    for (const auto& r : model.chunk_blocks())
      chunks += " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
    std::printf("rank 0: blocks%s; parameters %lld of %lld (%.1f KiB of weights, gradients and "
                "AdamW moments); schedule bubble (p-1)/(v·m) = %.3f\n",
                chunks.c_str(), static_cast<long long>(params),
                static_cast<long long>(full.num_parameters()),
                4.0 * static_cast<double>(params * static_cast<std::int64_t>(elem)) / 1024.0,
                pp::bubble_formula(f.pp, f.virtual_stages, m));
  }
  double worst = 0.0, loss = 0.0, ref = 0.0;
  const std::int64_t rows = f.batch / D;
  for (std::int64_t s = first_step; s < first_step + f.steps; ++s) {
    const data::TextBatch batch = loader.batch(s);
    const auto started = std::chrono::steady_clock::now();
    const std::int64_t r0 = g.coords().dp * rows;
    const pp::PipelineStepReport rep = model.train_step(batch.inputs.slice(r0, r0 + rows).clone(),
                                                        batch.targets.slice(r0, r0 + rows).clone());
    loss = rep.loss;
    optimizer.step();
    const double step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    if (f.check) {  // the unsplit model on the whole batch
      full.zero_grad();
      ref = nn::gpt_loss_step(full, batch.inputs, batch.targets);
      full_optimizer.step();
      worst = std::max(worst, std::abs(loss - ref));
    }
    // Across the ranks (not part of the step): the largest peak memory, the bubble on the
    // wall clock over the pipeline ranks, the messages and collectives of every rank.
    Tensor stats = Tensor::from_vector(std::vector<double>{static_cast<double>(rep.peak_bytes),
                                                           rep.span_s - rep.busy_s, rep.busy_s},
                                       {3});
    Tensor peak = stats.slice(0, 1), times = stats.slice(1, 3);
    world->all_reduce(peak, dist::ReduceOp::max).wait();
    world->all_reduce(times, dist::ReduceOp::sum).wait();
    const std::vector<double> v = stats.to_vector<double>();
    if (rank == 0) {
      std::printf("step %lld loss %.6f", static_cast<long long>(s), loss);
      if (f.check) std::printf(" one process %.6f |diff| %.2e", ref, std::abs(loss - ref));
      std::printf(" | %.0f ms; rank 0: %lld collectives, %lld sends (%.1f KiB), peak step memory %.1f KiB;"
                  " largest peak %.1f KiB; bubble measured %.3f\n",
                  step_ms, static_cast<long long>(rep.collectives), static_cast<long long>(rep.messages),
                  static_cast<double>(rep.message_bytes) / 1024.0,
                  static_cast<double>(rep.peak_bytes) / 1024.0, v[0] / 1024.0, v[1] / v[2]);
    }
  }
  if (!f.save.empty()) {
    std::map<std::string, Tensor> state = optimizer.state();
    const io::ShardedDict dict = checkpoint_dict(model, state, config, g, true);
    const io::Metadata meta{{"step", std::to_string(first_step + f.steps)},
                            {"batch_size", std::to_string(f.batch)},
                            {"layout", shape.str()}};
    const std::string index = io::save_sharded(*world, f.save, dict, meta);
    if (rank == 0) std::printf("saved %s (step %lld)\n", index.c_str(), static_cast<long long>(first_step + f.steps));
  }
  if (rank == 0) {
    std::printf("final: loss %.6f", loss);
    if (f.check) std::printf(" one process %.6f largest |diff| %.2e", ref, worst);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App cli{"Lesson 15: train gpt-tiny on a DP x TP x PP grid of the ranks started with "
               "tools/mpirun -np DP·TP·PP, beside the unsplit model."};
  cli.add_option("--data", f.data, "synthetic, shakespeare or a text file")->capture_default_str();
  cli.add_option("--steps", f.steps, "optimizer steps")->capture_default_str();
  cli.add_option("--batch-size", f.batch, "windows per step, over all replicas")->capture_default_str();
  cli.add_option("--seq", f.seq, "tokens per window (T)")->capture_default_str();
  cli.add_option("--dp", f.dp, "data-parallel replicas")->capture_default_str();
  cli.add_option("--tp", f.tp, "ranks of each tensor-parallel group (divides the 4 heads)")->capture_default_str();
  cli.add_option("--pp", f.pp, "pipeline stages")->capture_default_str();
  cli.add_option("--schedule", f.schedule, "gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))->capture_default_str();
  cli.add_option("--virtual", f.virtual_stages, "model chunks per pipeline rank (interleaved)")->capture_default_str();
  cli.add_option("--micro", f.micro, "micro-batches per step (0: 2·PP)")->capture_default_str();
  cli.add_option("--lr", f.lr, "AdamW's learning rate")->capture_default_str();
  cli.add_option("--seed", f.seed, "weights and batches")->capture_default_str();
  cli.add_flag("--check,!--no-check", f.check, "also train the unsplit model and print its loss");
  cli.add_option("--dtype", f.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  cli.add_option("--save", f.save, "write a sharded checkpoint here after the last step");
  cli.add_option("--load", f.load, "start from a sharded checkpoint saved on any layout");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
