// plan: which DP x TP x PP layout to train a GPT with. Given the model's shape, how the run
// stores its numbers (precision, ZeRO stage, recomputation, flash attention), the cluster
// (lesson 09's hardware file, or flags: GPUs, links, each GPU's compute) and each GPU's
// memory, it lists every layout the model allows with the memory per rank (model states,
// activations) and the predicted step time (compute, TP's all-reduces, the pipeline's bubble
// and messages, DP's collectives), those that fit first, fastest first, and marks the rows
// the model cannot tell apart (mgpu/perf/planner.h and training_memory.h hold the formulas).
// With --measured it prints measured step times beside the prediction and the error.
//
//   build/solutions/15_3d_parallel/plan --model gpt2-small --cluster "8 GPUs, NVLink" --batch 32
//   build/solutions/15_3d_parallel/plan --model gpt3-6.7b --gpus 64 --memory-gib 80
//       --tflops 400 --inter-gbit 400 --inter-per gpu --batch 512 --precision bf16
//       --recompute selective --flash
//   build/solutions/15_3d_parallel/plan --hardware lessons/15_3d_parallel/machine.json
//       --cluster "this machine, 4 ranks" --model tiny --measured measured.jsonl
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

#include "mgpu/app/flags.h"
#include "mgpu/app/run.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/perf/planner.h"

namespace {

using namespace mgpu;

struct Flags {
  std::string hardware = "lessons/09_time_cost/hardware.json";
  std::string cluster = "8 GPUs, NVLink";
  std::string model = "gpt2-small";
  std::string schedule = "1f1b";
  std::string measured;
  std::string precision = "fp32", recompute = "none", inter_per = "node";
  double memory_gib = 0, error_pct = 10;
  std::int64_t layers = 0, heads = 0, embd = 0, vocab = 0, seq = 0, context = 0;  // 0: the model's
  std::int64_t batch = 8, micro_batch = 1;
  int virtual_stages = 1, top = 0, zero = 1;
  int gpus = 0, gpus_per_node = 8;                         // a cluster by hand (--gpus N)
  double tflops = 0, intra_gbs = 370, intra_us = 3, inter_gbit = 400, inter_us = 8;
  bool sp = false, ddp = false, flash = false, dropout = false, fp32_grads = false;
};

double mib(double bytes) { return bytes / (1 << 20); }

// JSON lines {"dp": A, "tp": B, "pp": C, "step_ms": T}: measured step times by layout.
std::map<std::tuple<int, int, int>, double> read_measured(const std::string& path) {
  std::map<std::tuple<int, int, int>, double> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  MGPU_CHECK(in, "--measured: cannot open ", path);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      out[{j.at("dp").get<int>(), j.at("tp").get<int>(), j.at("pp").get<int>()}] =
          j.at("step_ms").get<double>() * 1e-3;
    } catch (const nlohmann::json::exception& e) {
      MGPU_FAIL("--measured: ", path, " line ", line_no, ": expected {\"dp\", \"tp\", \"pp\", "
                "\"step_ms\"} (", e.what(), ")");
    }
  }
  return out;
}

perf::ModelShape model_of(const Flags& f) {
  // The presets: lesson 12's gpt-tiny, GPT-2 small, and GPT-3 6.7B (the GPT-3 paper's
  // "Language Models are Few-Shot Learners" Table 2.1: 32 layers, d = 4096, 32 heads, 2048
  // tokens of context), all with learned positions and the tied head of lesson 12's GPT.
  perf::ModelShape m = f.model == "tiny"        ? perf::ModelShape{65, 128, 4, 4, 128, 128}
                       : f.model == "gpt3-6.7b" ? perf::ModelShape{50257, 2048, 32, 32, 4096, 2048}
                                                : perf::ModelShape{50257, 1024, 12, 12, 768, 1024};
  if (f.layers > 0) m.n_layer = f.layers;
  if (f.heads > 0) m.n_head = f.heads;
  if (f.embd > 0) m.n_embd = f.embd;
  if (f.vocab > 0) m.vocab_size = f.vocab;
  if (f.context > 0) m.positions = m.seq = f.context;
  if (f.seq > 0) m.seq = f.seq;
  return m;
}

perf::Cluster cluster_of(const Flags& f) {
  perf::Cluster c;
  if (f.gpus > 0) {  // by hand: --gpus and the links' figures, lesson 09's units
    c.hardware.name = "given by hand";
    c.hardware.gpus_per_node = std::min(f.gpus, f.gpus_per_node);
    MGPU_CHECK(f.gpus % c.hardware.gpus_per_node == 0, "--gpus ", f.gpus,
               " is not a whole number of nodes of ", c.hardware.gpus_per_node);
    c.hardware.nodes = f.gpus / c.hardware.gpus_per_node;
    c.hardware.intra_busbw = 1e9 * f.intra_gbs;
    c.hardware.intra_latency_s = 1e-6 * f.intra_us;
    c.hardware.inter_bw = 1e9 / 8 * f.inter_gbit;
    c.hardware.inter_latency_s = 1e-6 * f.inter_us;
    c.flops = 1e12 * (f.tflops > 0 ? f.tflops : 100);
    c.memory_bytes = f.memory_gib * (1ull << 30);
  } else {
    c = perf::read_cluster(f.hardware, f.cluster, f.memory_gib);
    if (f.tflops > 0) c.flops = 1e12 * f.tflops;
  }
  // The planner's network figure is a node's (lesson 09's); a per-GPU figure is per NIC,
  // one NIC a GPU, as on DGX-class machines.
  if (f.inter_per == "gpu") c.hardware.inter_bw *= c.hardware.gpus_per_node;
  return c;
}

std::string precision_words(const perf::JobSettings& job) {
  const perf::Precision& p = job.precision;
  const double total = p.value_bytes() + p.grad_bytes() + p.optimizer_bytes();
  std::string out = p.mixed() ? p.name + " with fp32 master weights, " +
                                    (p.fp32_grads ? "fp32" : "16-bit") + " gradients"
                              : std::string("fp32 weights and gradients");
  out += ", AdamW: " + std::to_string(static_cast<int>(total)) + " bytes a parameter before ZeRO";
  return out;
}

int plan(const Flags& f) {
  const perf::ModelShape m = model_of(f);
  perf::JobSettings job;
  job.global_batch = f.batch;
  job.micro_batch = f.micro_batch;
  job.zero_stage = f.ddp ? 0 : f.zero;
  job.precision.name = f.precision;
  job.precision.fp32_grads = f.fp32_grads;
  job.recompute = f.recompute;
  job.flash_attention = f.flash;
  job.dropout = f.dropout;
  job.sequence_parallel = f.sp;
  job.schedule = f.schedule;
  job.virtual_stages = f.virtual_stages;
  MGPU_CHECK(!f.fp32_grads || job.precision.mixed(), "--fp32-grads needs --precision bf16 or fp16");
  const perf::Cluster c = cluster_of(f);
  const auto measured = read_measured(f.measured);
  // Everything that can be refused is refused before the first line of the answer.
  std::vector<perf::PlanEntry> all = perf::plan_layouts(m, job, c);
  MGPU_CHECK(!all.empty(), "plan: no layout of ", c.hardware.ranks(), " GPUs fits this model and batch ",
             "(the TP size must divide the heads, the stages at most the blocks, the replicas "
             "times the micro-batch the batch)");
  const int ties = perf::mark_ties(all, f.error_pct / 100);

  const perf::Hardware& hw = c.hardware;
  std::printf("model: %lld layers, %lld heads, C = %lld, T = %lld (context %lld), vocabulary %lld: %.1fM parameters\n",
              static_cast<long long>(m.n_layer), static_cast<long long>(m.n_head),
              static_cast<long long>(m.n_embd), static_cast<long long>(m.seq),
              static_cast<long long>(m.position_rows()), static_cast<long long>(m.vocab_size),
              m.parameters() / 1e6);
  std::printf("cluster: %s, %d GPUs (%d node(s) of %d), %.3g TFLOP/s each (%s)%s, memory %s\n",
              hw.name.c_str(), hw.ranks(), hw.nodes, hw.gpus_per_node, c.flops / 1e12,
              f.tflops > 0 ? "--tflops" : f.gpus > 0 ? "the default by hand" : "the hardware file",
              c.compute_devices > 0
                  ? (" (all sharing " + std::to_string(c.compute_devices).substr(0, 4) + " device(s))").c_str()
                  : "",
              c.memory_bytes > 0 ? (std::to_string(static_cast<long long>(mib(c.memory_bytes))) + " MiB").c_str()
                                 : "not limited");
  if (hw.nodes > 1) {
    const double per_gpu = hw.inter_bw / hw.gpus_per_node;
    std::printf("network: %.0f Gb/s per %s as given (--inter-per %s): %.2f GB/s per GPU, %.1f GB/s "
                "per node; inside a node %.0f GB/s all-reduce bus bandwidth\n",
                8e-9 * (f.inter_per == "gpu" ? per_gpu : hw.inter_bw),
                f.inter_per == "gpu" ? "GPU" : "node", f.inter_per.c_str(), 1e-9 * per_gpu, 1e-9 * hw.inter_bw, 1e-9 * hw.intra_busbw);
  } else {
    std::printf("network: one node, no network; inside it %.0f GB/s all-reduce bus bandwidth\n",
                1e-9 * hw.intra_busbw);
  }
  std::printf("run: %s; %s over DP; recomputation %s; attention %s%s%s\n", precision_words(job).c_str(),
              job.zero_stage == 0 ? "DDP (ZeRO-0)" : ("ZeRO-" + std::to_string(job.zero_stage)).c_str(),
              job.recompute.c_str(), job.flash_attention ? "flash (scores not kept)" : "scores kept",
              job.dropout ? ", dropout" : ", no dropout", job.sequence_parallel ? ", SP" : "");
  std::printf("step: %lld sequences, micro-batches of %lld, %s%s; ties: within %.0f%% of the fastest\n\n",
              static_cast<long long>(job.global_batch), static_cast<long long>(job.micro_batch),
              job.schedule.c_str(),
              job.schedule == "interleaved" ? (" v=" + std::to_string(job.virtual_stages)).c_str() : "",
              f.error_pct);
  double largest = 0;
  for (const perf::PlanEntry& e : all) largest = std::max(largest, e.memory.total());
  const bool gib = largest >= 10.0 * (1ull << 30);
  const double unit = gib ? 1ull << 30 : 1 << 20;
  const char* u = gib ? "GiB" : "MiB";
  const std::string in_u = std::string(" ") + u;
  std::printf("%-3s %-18s %4s | %9s %9s %9s %9s %9s | %9s %8s %8s %8s %8s %9s%s\n", "#", "layout",
              "fits", ("param" + in_u).c_str(), ("grad" + in_u).c_str(), ("optim" + in_u).c_str(),
              ("activ" + in_u).c_str(), ("total" + in_u).c_str(), "compute", "tp comm", "bubble",
              "pp comm", "dp comm", "step ms", measured.empty() ? "" : "  measured   error");
  int shown = 0;
  double worst = 0;
  for (const perf::PlanEntry& e : all) {
    if (f.top > 0 && shown >= f.top) break;
    ++shown;
    const perf::TimeEstimate& t = e.time;
    const std::string rank = e.tie ? "1=" : std::to_string(shown);
    std::printf("%-3s %-18s %4s | %9.1f %9.1f %9.1f %9.1f %9.1f | %9.2f %8.2f %8.2f %8.2f %8.2f %9.2f",
                rank.c_str(), e.layout.str().c_str(), e.fits ? "yes" : "no", e.memory.parameters / unit,
                e.memory.gradients / unit, e.memory.optimizer / unit, e.memory.activations / unit,
                e.memory.total() / unit, 1e3 * t.compute_s, 1e3 * t.tp_comm_s, 1e3 * t.bubble_s,
                1e3 * t.pp_comm_s, 1e3 * t.dp_comm_s, 1e3 * t.step_s());
    const auto it = measured.find({e.layout.dp, e.layout.tp, e.layout.pp});
    if (it != measured.end()) {
      const double err = (t.step_s() - it->second) / it->second;
      worst = std::max(worst, std::abs(err));
      std::printf(" %9.2f %+6.0f%%", 1e3 * it->second, 100 * err);
    }
    std::printf("\n");
  }
  if (ties > 0)
    std::printf("\n1=: %d layouts within %.0f%% of the fastest, the planner's stated error: the model "
                "does not choose between them\n", ties, f.error_pct);
  if (!measured.empty()) std::printf("\nlargest |error| over the measured layouts: %.0f%%\n", 100 * worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App cli{"Lesson 15: the DP x TP x PP layouts of a GPT on a cluster, with the memory per "
               "rank and the predicted step time, those that fit first, fastest first."};
  cli.add_option("--hardware", f.hardware, "lesson 09's hardware file (device and clusters)")->capture_default_str();
  cli.add_option("--cluster", f.cluster, "the cluster's name in that file")->capture_default_str();
  cli.add_option("--gpus", f.gpus, "a cluster given by hand instead of the file: its GPUs (with the options below)")->check(app::positive_integer(1 << 24));
  cli.add_option("--gpus-per-node", f.gpus_per_node, "by hand: GPUs per node")->check(app::positive_integer(1 << 24))->capture_default_str();
  cli.add_option("--tflops", f.tflops, "sustained TFLOP/s per GPU (default: the hardware file's; by hand 100)")->check(app::positive_real());
  cli.add_option("--intra-gbs", f.intra_gbs, "by hand: all-reduce bus bandwidth inside a node, GB/s")->check(app::positive_real())->capture_default_str();
  cli.add_option("--intra-us", f.intra_us, "by hand: latency inside a node, microseconds")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--inter-gbit", f.inter_gbit, "by hand: network per node, Gbit/s")->check(app::positive_real())->capture_default_str();
  cli.add_option("--inter-per", f.inter_per, "the network figure (--inter-gbit, or the file's inter_gbit) is per node or per GPU (one NIC a GPU)")->check(CLI::IsMember({"node", "gpu"}))->capture_default_str();
  cli.add_option("--inter-us", f.inter_us, "by hand: latency between nodes, microseconds")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--memory-gib", f.memory_gib, "memory per GPU in GiB (0: the file's device.memory_gib, or unlimited)")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--model", f.model, "tiny (gpt-tiny), gpt2-small or gpt3-6.7b")->check(CLI::IsMember({"tiny", "gpt2-small", "gpt3-6.7b"}))->capture_default_str();
  cli.add_option("--layers", f.layers, "blocks (default: the model's)")->check(app::positive_integer(1 << 20));
  cli.add_option("--heads", f.heads, "attention heads (default: the model's)")->check(app::positive_integer(1 << 20));
  cli.add_option("--embd", f.embd, "C (default: the model's)")->check(app::positive_integer(1 << 24));
  cli.add_option("--vocab", f.vocab, "vocabulary (default: the model's)")->check(app::positive_integer(1 << 30));
  cli.add_option("--context", f.context, "the position table's rows, the longest sequence (default: the model's); T too unless --seq")->check(app::positive_integer(1 << 24));
  cli.add_option("--seq", f.seq, "tokens per sequence, T, at most the context (default: the context)")->check(app::positive_integer(1 << 24));
  cli.add_option("--batch", f.batch, "sequences per optimizer step, all replicas together")->check(app::positive_integer(1 << 30))->capture_default_str();
  cli.add_option("--micro-batch", f.micro_batch, "sequences per micro-batch")->check(app::positive_integer(1 << 30))->capture_default_str();
  cli.add_option("--schedule", f.schedule, "gpipe, 1f1b or interleaved")->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))->capture_default_str();
  cli.add_option("--virtual-stages", f.virtual_stages, "model chunks per rank (interleaved)")->check(app::positive_integer(1 << 16))->capture_default_str();
  cli.add_flag("--sp", f.sp, "sequence parallelism inside the TP groups");
  cli.add_flag("--ddp", f.ddp, "DDP over DP: the same as --zero 0");
  cli.add_option("--zero", f.zero, "ZeRO stage over DP: 0 (DDP), 1 optimizer state, 2 + gradients, 3 + weights")->check(CLI::Range(0, 3))->capture_default_str();
  cli.add_option("--precision", f.precision, "fp32 (this library's), or bf16 / fp16 with fp32 master weights")->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  cli.add_flag("--fp32-grads", f.fp32_grads, "mixed precision: gradients kept in fp32 (Megatron-LM's main_grad) instead of 16-bit");
  cli.add_option("--recompute", f.recompute, "activation recomputation: none, selective (the attention core) or full (each block's input kept)")->check(CLI::IsMember({"none", "selective", "full"}))->capture_default_str();
  cli.add_flag("--flash", f.flash, "flash attention: the attention scores never kept");
  cli.add_flag("--dropout", f.dropout, "dropout after attention and MLP (its masks kept; this library's GPT has none)");
  cli.add_option("--error-pct", f.error_pct, "the planner's stated error: layouts within it of the fastest are marked as ties (1=)")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--top", f.top, "rows to print (0: all)")->check(app::non_negative_integer())->capture_default_str();
  cli.add_option("--measured", f.measured, "JSON lines {dp, tp, pp, step_ms}: measured steps beside the prediction");
  // A refused flag is one line, as every other refusal of this program.
  cli.failure_message([](const CLI::App*, const CLI::Error& e) { return "error: " + std::string(e.what()) + "\n"; });
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_main([&] { return plan(f); });
}
