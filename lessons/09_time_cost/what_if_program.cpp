// what_if: lesson 09's model as a program. It fits alpha and beta to lesson 04's all-reduce
// measurements, takes the compute of a one-rank run, predicts the step time for N ranks
// with your predict_step (task 3), compares the prediction with measured runs, and gives
// the verdict of your what_if (task 4) on hardware we do not have.
//
//   what_if --allreduce ar.csv --allreduce-ranks 2 --workload one_rank.jsonl --ranks 1,2,3,4
//     (one_rank.jsonl: `train --breakdown` of a one-rank run; ar.csv: bench_allreduce --csv)
//   what_if ... --global-batch 256                      strong scaling: G/N samples per rank
//   what_if ... --measured scaling.jsonl --json out.jsonl   the model's error, for tools/plot
//   what_if --hardware lessons/09_time_cost/hardware.json --workload one_rank.jsonl
//   what_if --alpha-us 500 --beta-ns 8 --workload one_rank.jsonl --ranks 2   a link given by hand
//   what_if ... --devices 1      the ranks share one device's worth of compute (more ranks than cores)
//   what_if --hardware lessons/09_time_cost/hardware.json --alltoall-mib 441   an all-to-all of
//     441 MiB a rank (lesson 16's expert parallelism) over each cluster's ranks
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mgpu/app/flags.h"
#include "mgpu/perf/moe_model.h"
#include "mgpu/perf/time_cost.h"
#include "workload_io.h"

namespace {

using namespace mgpu::lesson09;
using namespace mgpu::perf;
using nlohmann::json;

struct Options {
  std::string allreduce_csv, workload, measured, hardware, json_out;
  int allreduce_ranks = 2;
  double alpha_us = -1, beta_ns = -1;
  double devices = 0;  // 0: every rank has a device of its own
  double alltoall_mib = 0;  // > 0: the all-to-all table for this many MiB a rank
  std::string ranks = "1,2,3,4";
  std::int64_t batch = 0, global_batch = 0;
};

constexpr long long kMaxRanks = 1 << 20;

// "1,2,3,4" -> {1, 2, 3, 4}; each a whole number from 1 to kMaxRanks, at least one.
std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(item.c_str(), &end, 10);
    MGPU_CHECK(!item.empty() && errno == 0 && end == item.c_str() + item.size() && n >= 1 &&
                   n <= kMaxRanks,
               "--ranks: '", item, "' is not a rank count from 1 to ", kMaxRanks,
               " (use e.g. 1,2,3,4)");
    out.push_back(static_cast<int>(n));
  }
  MGPU_CHECK(!out.empty(), "--ranks: '", text, "' names no rank count (use e.g. 1,2,3,4)");
  return out;
}

// N ranks on D devices (D < N: ranks taking turns on too few cores) compute N/D times slower
// each; the model's task-3 formula assumes a device per rank, so the workload is scaled here.
Workload sharing(Workload w, int ranks, double devices) {
  const double slowdown = devices > 0 ? std::max(1.0, ranks / devices) : 1.0;
  w.forward_s_per_sample *= slowdown;
  w.backward_s_per_sample *= slowdown;
  return w;
}

// Part 1: the measured machine. Predictions for each N, beside measured runs if given.
void predict_here(const Options& o, const AlphaBeta& link, const Workload& w,
                  std::int64_t batch_of_workload, std::ofstream& json_out) {
  const bool strong = o.global_batch > 0;
  const std::vector<MeasuredRun> measured =
      o.measured.empty() ? std::vector<MeasuredRun>{} : read_measured_runs(o.measured);
  const std::int64_t batch = o.batch > 0 ? o.batch : batch_of_workload;
  std::printf("\n%s scaling, %s; time per step in ms", strong ? "strong" : "weak",
              strong ? ("global batch " + std::to_string(o.global_batch)).c_str()
                     : ("batch " + std::to_string(batch) + " per rank").c_str());
  if (o.devices > 0) std::printf("; the ranks share %.2f device(s)", o.devices);
  std::printf("\n");
  std::printf("%5s %7s %9s %8s %9s %9s %11s %7s %10s %7s %7s\n", "ranks", "batch", "compute",
              "comm", "exposed", "step", "samples/s", "E(N)", "measured", "E meas", "error");
  // E(N) is against one rank's predicted step, whether or not --ranks lists 1.
  const double one_rank_step =
      predict_step(sharing(w, 1, o.devices), strong ? o.global_batch : batch, 1, link).step_s;
  double one_rank_measured = 0;
  for (int n : parse_ranks(o.ranks)) {
    const std::int64_t b = strong ? o.global_batch / n : batch;
    MGPU_CHECK(b >= 1, "--global-batch ", o.global_batch, " gives no sample per rank at ", n, " ranks");
    const StepPrediction p = predict_step(sharing(w, n, o.devices), b, n, link);
    const Run one{1, strong ? o.global_batch : batch, one_rank_step};
    const double eff = one_rank_step > 0 ? scaling_efficiency(one, {n, b * n, p.step_s}) : NAN;
    const MeasuredRun* m = find_run(measured, strong ? "strong" : "weak", n, b);
    if (m && n == 1) one_rank_measured = m->step_s;
    const double eff_m = m && one_rank_measured > 0
                             ? scaling_efficiency({1, one.global_batch, one_rank_measured},
                                                  {n, b * n, m->step_s})
                             : NAN;
    std::printf("%5d %7lld %9.2f %8.2f %9.2f %9.2f %11.0f %6.0f%%", n, static_cast<long long>(b),
                1e3 * p.compute_s, 1e3 * p.comm_s, 1e3 * p.exposed_s, 1e3 * p.step_s,
                p.samples_per_s, 100 * eff);
    if (m && std::isnan(eff_m)) {  // no measured one-rank run to compare with
      std::printf(" %10.2f %7s %+6.0f%%\n", 1e3 * m->step_s, "-",
                  100 * (p.step_s - m->step_s) / m->step_s);
    } else if (m) {
      std::printf(" %10.2f %6.0f%% %+6.0f%%\n", 1e3 * m->step_s, 100 * eff_m,
                  100 * (p.step_s - m->step_s) / m->step_s);
    } else {
      std::printf(" %10s %7s %7s\n", "-", "-", "-");
    }
    if (json_out.is_open()) {
      json row{{"mode", strong ? "strong" : "weak"}, {"world_size", n}, {"batch_per_rank", b},
               {"predicted_step_ms", 1e3 * p.step_s},
               {"predicted_samples_per_s", p.samples_per_s},
               {"predicted_efficiency", eff}, {"predicted_exposed_ms", 1e3 * p.exposed_s}};
      if (m) {
        row["step_ms"] = 1e3 * m->step_s;
        row["samples_per_s"] = static_cast<double>(b * n) / m->step_s;
        row["efficiency"] = eff_m;
        row["error"] = (p.step_s - m->step_s) / m->step_s;
      }
      json_out << row.dump() << "\n";
    }
  }
  std::printf("(error = predicted / measured - 1, per step; E = T1 / (N TN) per sample)\n");
}

// Part 2: the what-if table.
void predict_hardware(const std::string& path, const Workload* measured_cnn) {
  const HardwareTable table = read_hardware_table(path);
  std::printf("\nwhat if (%s); compute: %s, %.0f TFLOP/s sustained, %.2f ms per step at least\n",
              path.c_str(), table.device_name.c_str(), table.sustained_tflops,
              1e3 * table.step_floor_s);
  std::printf("%-22s %-24s %5s %8s %9s %9s %9s %7s %10s\n", "model", "hardware", "ranks",
              "buckets", "compute", "exposed", "step", "E(N)", "bottleneck");
  for (const ModelSpec& spec : table.models) {
    const Workload w = workload_on_device(spec, table, measured_cnn);
    for (const Hardware& hw : table.hardware) {
      const WhatIf r = what_if(w, hw, spec.batch_per_rank);
      std::printf("%-22s %-24s %5d %8zu %8.2fms %8.2fms %8.2fms %6.0f%% %10s\n",
                  spec.name.c_str(), hw.name.c_str(), hw.ranks(), w.bucket_bytes.size(),
                  1e3 * (r.step.compute_s + w.fixed_s), 1e3 * r.step.exposed_s,
                  1e3 * r.step.step_s, 100 * r.efficiency, r.bottleneck.c_str());
    }
  }
  std::printf("(one flat ring over all GPUs; E is weak scaling against one GPU of the same "
              "kind; compute as assumed above)\n");
}

// Part 3: lesson 16's all-to-all on the table's clusters, beside the ring all-reduce of the
// same buffer (group_alltoall_seconds: inside a node lesson 04's (P-1)a + (P-1)/P n b; across
// nodes one GPU's share of the node's network for the messages that leave it).
void predict_alltoall(const std::string& path, double mib) {
  const HardwareTable table = read_hardware_table(path);
  const double bytes = mib * 1048576.0;
  std::printf("\nall-to-all of %.1f MiB a rank over all ranks (%s)\n", mib, path.c_str());
  std::printf("%-24s %5s %13s %13s\n", "hardware", "ranks", "all-to-all", "all-reduce");
  for (const Hardware& hw : table.hardware)
    std::printf("%-24s %5d %11.2fms %11.2fms\n", hw.name.c_str(), hw.ranks(),
                1e3 * group_alltoall_seconds(hw, bytes, hw.ranks(), 1),
                1e3 * ring_allreduce_seconds(effective_link(hw), bytes, hw.ranks()));
  std::printf("(the all-reduce: one flat ring at effective_link's alpha and beta)\n");
}

int run(const Options& o) {
  if (o.alltoall_mib > 0) {
    MGPU_CHECK(!o.hardware.empty(), "--alltoall-mib needs --hardware FILE (the clusters)");
    predict_alltoall(o.hardware, o.alltoall_mib);
    if (o.workload.empty()) return 0;
  }
  parse_ranks(o.ranks);  // a wrong list is refused before any file is read
  MGPU_CHECK(o.batch == 0 || o.global_batch == 0, "--batch ", o.batch, " and --global-batch ",
             o.global_batch, " exclude each other: --batch is weak scaling's samples per rank, "
             "--global-batch strong scaling's samples per step in all; give one");
  MGPU_CHECK((o.alpha_us < 0) == (o.beta_ns < 0), "--alpha-us and --beta-ns go together: a link "
             "by hand needs both (e.g. --alpha-us 500 --beta-ns 8)");
  MGPU_CHECK(!o.workload.empty(), "--workload: give the --breakdown file of a one-rank run of "
             "lesson 09's train (its compute and buckets feed the model)");
  std::int64_t batch = 0;
  const Workload w = read_workload(o.workload, &batch);
  std::printf("workload (%s): forward %.3f ms + backward %.3f ms per sample, %.2f ms fixed per "
              "step, %zu bucket(s):", o.workload.c_str(), 1e3 * w.forward_s_per_sample,
              1e3 * w.backward_s_per_sample, 1e3 * w.fixed_s, w.bucket_bytes.size());
  for (std::size_t k = 0; k < w.bucket_bytes.size(); ++k)
    std::printf(" %.3f MiB ready at %.0f%%", w.bucket_bytes[k] / 1048576.0, 100 * w.bucket_ready[k]);
  std::printf("\n");

  AlphaBeta link;
  const bool have_link = !o.allreduce_csv.empty() || (o.alpha_us >= 0 && o.beta_ns >= 0);
  if (!o.allreduce_csv.empty()) {
    link = fit_link_from_csv(o.allreduce_csv, o.allreduce_ranks);
    std::printf("link: fitted to %s (%d ranks, the library's all_reduce): ", o.allreduce_csv.c_str(),
                o.allreduce_ranks);
  } else if (have_link) {
    link = {o.alpha_us * 1e-6, o.beta_ns * 1e-9};
    std::printf("link: given: ");
  }
  if (have_link)
    std::printf("alpha %.1f us per message, beta %.3f ns/B (%.3f GB/s)\n", 1e6 * link.alpha,
                1e9 * link.beta, link.bandwidth_gbs());

  std::ofstream json_out;
  if (!o.json_out.empty()) {
    json_out.open(o.json_out);
    MGPU_CHECK(json_out.good(), "--json: cannot write ", o.json_out);
  }
  if (have_link) predict_here(o, link, w, batch, json_out);
  if (!o.hardware.empty()) predict_hardware(o.hardware, &w);
  MGPU_CHECK(have_link || !o.hardware.empty(), "nothing to predict: give the link (--allreduce "
             "CSV, or --alpha-us and --beta-ns) and/or --hardware FILE");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Lesson 09: the alpha-beta-compute model of a DDP step; predictions for N ranks "
               "and for other hardware, and their error against measured runs."};
  app.add_option("--workload", o.workload, "--breakdown file of a one-rank run of lesson 09's "
                 "train: per-sample compute, fixed time, buckets");
  app.add_option("--allreduce", o.allreduce_csv, "bench_allreduce --csv file: alpha and beta "
                 "are fitted to its library all_reduce times");
  app.add_option("--allreduce-ranks", o.allreduce_ranks, "ranks the CSV was measured with")
      ->check(CLI::Range(2, 1 << 20))->capture_default_str();
  app.add_option("--alpha-us", o.alpha_us, "or: alpha by hand, microseconds per message")
      ->check(mgpu::app::non_negative_real());
  app.add_option("--beta-ns", o.beta_ns, "and beta by hand, nanoseconds per byte")
      ->check(mgpu::app::non_negative_real());
  app.add_option("--devices", o.devices, "the ranks share this many devices' worth of compute "
                 "(e.g. cores): each rank computes max(1, N/D) times slower (0: a device per rank)")
      ->check(mgpu::app::non_negative_real());
  app.add_option("--ranks", o.ranks, "rank counts to predict, comma-separated")->capture_default_str();
  app.add_option("--batch", o.batch, "samples per rank (default: the workload's)")
      ->check(mgpu::app::positive_integer(std::int64_t{1} << 40));
  app.add_option("--global-batch", o.global_batch, "strong scaling: this many samples per step "
                 "in all, split over the ranks")
      ->check(mgpu::app::positive_integer(std::int64_t{1} << 40));
  app.add_option("--measured", o.measured, "JSON lines of measured runs (mode, world_size, "
                 "batch_per_rank, step_ms) to compare with");
  app.add_option("--hardware", o.hardware, "the what-if table (lessons/09_time_cost/hardware.json)");
  app.add_option("--json", o.json_out, "write the predictions (and errors) as JSON lines");
  app.add_option("--alltoall-mib", o.alltoall_mib, "with --hardware: the all-to-all of this many "
                 "MiB a rank over each cluster's ranks (lesson 16's expert parallelism)")
      ->check(mgpu::app::non_negative_real());
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "what_if: %s\n", e.what());
    return 1;
  }
}
