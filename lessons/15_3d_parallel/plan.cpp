// plan: which DP x TP x PP layout to train a GPT with. Given the model's shape, the cluster
// (lesson 09's hardware file: GPUs, links, each GPU's compute) and each GPU's memory, it lists
// every layout the model allows with the memory per rank (parameters, gradients, AdamW's
// moments, activations) and the predicted step time (compute, TP's all-reduces, the
// pipeline's bubble and messages, DP's reduction), those that fit first, fastest first
// (mgpu/perf/planner.h holds the formulas). With --measured it prints measured step times
// beside the prediction and the error.
//
//   build/solutions/15_3d_parallel/plan --model gpt2-small --cluster "8 GPUs, NVLink" --batch 32
//   build/solutions/15_3d_parallel/plan --model gpt2-small --cluster "16 nodes x 8, 400 Gb/s"
//       --memory-gib 16 --batch 256 --micro-batch 2
//   build/solutions/15_3d_parallel/plan --model tiny --gpus 16 --gpus-per-node 8 --memory-gib 1
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
  double memory_gib = 0;
  std::int64_t layers = 0, heads = 0, embd = 0, vocab = 0, seq = 0;
  std::int64_t batch = 8, micro_batch = 1;
  int virtual_stages = 1, top = 0;
  int gpus = 0, gpus_per_node = 8;                         // a cluster by hand (--gpus N)
  double tflops = 100, intra_gbs = 370, intra_us = 3, inter_gbit = 400, inter_us = 8;
  bool sp = false, ddp = false;
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

int plan(const Flags& f) {
  perf::ModelShape m = f.model == "tiny" ? perf::ModelShape{65, 128, 4, 4, 128, 128}
                                         : perf::ModelShape{50257, 1024, 12, 12, 768, 1024};
  if (f.layers > 0) m.n_layer = f.layers;
  if (f.heads > 0) m.n_head = f.heads;
  if (f.embd > 0) m.n_embd = f.embd;
  if (f.vocab > 0) m.vocab_size = f.vocab;
  if (f.seq > 0) m.seq = f.seq;
  perf::JobSettings job;
  job.global_batch = f.batch;
  job.micro_batch = f.micro_batch;
  job.zero1 = !f.ddp;
  job.sequence_parallel = f.sp;
  job.schedule = f.schedule;
  job.virtual_stages = f.virtual_stages;
  perf::Cluster c;
  if (f.gpus > 0) {  // by hand: --gpus and the links' figures, lesson 09's units
    c.hardware.name = "given by hand";
    c.hardware.gpus_per_node = std::min(f.gpus, f.gpus_per_node);
    MGPU_CHECK(f.gpus % c.hardware.gpus_per_node == 0, "--gpus ", f.gpus, " is not a whole number of nodes of ",
               c.hardware.gpus_per_node);
    c.hardware.nodes = f.gpus / c.hardware.gpus_per_node;
    c.hardware.intra_busbw = 1e9 * f.intra_gbs;
    c.hardware.intra_latency_s = 1e-6 * f.intra_us;
    c.hardware.inter_bw = 1e9 / 8 * f.inter_gbit;
    c.hardware.inter_latency_s = 1e-6 * f.inter_us;
    c.flops = 1e12 * f.tflops;
    c.memory_bytes = f.memory_gib * (1ull << 30);
  } else {
    c = perf::read_cluster(f.hardware, f.cluster, f.memory_gib);
  }
  const auto measured = read_measured(f.measured);

  std::printf("model: %lld layers, %lld heads, C = %lld, T = %lld, vocabulary %lld: %.1fM parameters\n",
              static_cast<long long>(m.n_layer), static_cast<long long>(m.n_head),
              static_cast<long long>(m.n_embd), static_cast<long long>(m.seq),
              static_cast<long long>(m.vocab_size), m.parameters() / 1e6);
  std::printf("cluster: %s, %d GPUs, %.3g TFLOP/s each%s, memory %s\n", c.hardware.name.c_str(),
              c.hardware.ranks(), c.flops / 1e12,
              c.compute_devices > 0
                  ? (" (all sharing " + std::to_string(c.compute_devices).substr(0, 4) + " device(s))").c_str()
                  : "",
              c.memory_bytes > 0 ? (std::to_string(static_cast<long long>(mib(c.memory_bytes))) + " MiB").c_str()
                                 : "not limited");
  std::printf("step: %lld sequences, micro-batches of %lld, %s%s, %s\n\n",
              static_cast<long long>(job.global_batch), static_cast<long long>(job.micro_batch),
              job.schedule.c_str(),
              job.schedule == "interleaved" ? (" v=" + std::to_string(job.virtual_stages)).c_str() : "",
              job.zero1 ? "ZeRO-1 over DP" : "DDP");
  std::printf("%-18s %4s | %9s %9s %9s %9s %9s | %9s %8s %8s %8s %8s %9s%s\n", "layout", "fits",
              "param MiB", "grad MiB", "optim MiB", "activ MiB", "total MiB", "compute", "tp comm",
              "bubble", "pp comm", "dp comm", "step ms", measured.empty() ? "" : "  measured   error");
  const std::vector<perf::PlanEntry> all = perf::plan_layouts(m, job, c);
  MGPU_CHECK(!all.empty(), "plan: no layout of ", c.hardware.ranks(), " GPUs fits this model and batch ",
             "(the TP size must divide the heads, the stages at most the blocks, the replicas "
             "times the micro-batch the batch)");
  int shown = 0;
  double worst = 0;
  for (const perf::PlanEntry& e : all) {
    if (f.top > 0 && shown++ >= f.top) break;
    const perf::TimeEstimate& t = e.time;
    std::printf("%-18s %4s | %9.1f %9.1f %9.1f %9.1f %9.1f | %9.2f %8.2f %8.2f %8.2f %8.2f %9.2f",
                e.layout.str().c_str(), e.fits ? "yes" : "no", mib(e.memory.parameters),
                mib(e.memory.gradients), mib(e.memory.optimizer), mib(e.memory.activations),
                mib(e.memory.total()), 1e3 * t.compute_s, 1e3 * t.tp_comm_s, 1e3 * t.bubble_s,
                1e3 * t.pp_comm_s, 1e3 * t.dp_comm_s, 1e3 * t.step_s());
    const auto it = measured.find({e.layout.dp, e.layout.tp, e.layout.pp});
    if (it != measured.end()) {
      const double err = (t.step_s() - it->second) / it->second;
      worst = std::max(worst, std::abs(err));
      std::printf(" %9.2f %+6.0f%%", 1e3 * it->second, 100 * err);
    }
    std::printf("\n");
  }
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
  cli.add_option("--tflops", f.tflops, "by hand: sustained TFLOP/s per GPU")->check(app::positive_real())->capture_default_str();
  cli.add_option("--intra-gbs", f.intra_gbs, "by hand: all-reduce bus bandwidth inside a node, GB/s")->check(app::positive_real())->capture_default_str();
  cli.add_option("--intra-us", f.intra_us, "by hand: latency inside a node, microseconds")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--inter-gbit", f.inter_gbit, "by hand: network per node, Gbit/s")->check(app::positive_real())->capture_default_str();
  cli.add_option("--inter-us", f.inter_us, "by hand: latency between nodes, microseconds")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--memory-gib", f.memory_gib, "memory per GPU in GiB (0: the file's device.memory_gib, or unlimited)")->check(app::non_negative_real())->capture_default_str();
  cli.add_option("--model", f.model, "tiny (gpt-tiny) or gpt2-small")->check(CLI::IsMember({"tiny", "gpt2-small"}))->capture_default_str();
  cli.add_option("--layers", f.layers, "blocks (0: the model's)")->check(app::non_negative_integer(1 << 20));
  cli.add_option("--heads", f.heads, "attention heads (0: the model's)")->check(app::non_negative_integer(1 << 20));
  cli.add_option("--embd", f.embd, "C (0: the model's)")->check(app::non_negative_integer(1 << 24));
  cli.add_option("--vocab", f.vocab, "vocabulary (0: the model's)")->check(app::non_negative_integer(1 << 30));
  cli.add_option("--seq", f.seq, "tokens per sequence, T (0: the model's context; the position table keeps the context's rows)")->check(app::non_negative_integer(1 << 24));
  cli.add_option("--batch", f.batch, "sequences per optimizer step, all replicas together")->check(app::positive_integer(1 << 30))->capture_default_str();
  cli.add_option("--micro-batch", f.micro_batch, "sequences per micro-batch")->check(app::positive_integer(1 << 30))->capture_default_str();
  cli.add_option("--schedule", f.schedule, "gpipe, 1f1b or interleaved")->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))->capture_default_str();
  cli.add_option("--virtual-stages", f.virtual_stages, "model chunks per rank (interleaved)")->check(app::positive_integer(1 << 16))->capture_default_str();
  cli.add_flag("--sp", f.sp, "sequence parallelism inside the TP groups");
  cli.add_flag("--ddp", f.ddp, "DDP over DP (the optimizer state whole on every replica) instead of ZeRO-1");
  cli.add_option("--top", f.top, "rows to print (0: all)")->check(app::non_negative_integer())->capture_default_str();
  cli.add_option("--measured", f.measured, "JSON lines {dp, tp, pp, step_ms}: measured steps beside the prediction");
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_main([&] { return plan(f); });
}
