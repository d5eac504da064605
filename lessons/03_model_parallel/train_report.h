/// @file train_report.h
/// @brief What lesson 03's program prints around its training loop: the stages, the
/// schedule on its own clock, the sweep of GPipe against 1F1B, and the closing report (the
/// last step's timeline, busy and idle time per stage, the measured bubble, peak memory).
/// Program-only: the tests do not use it.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/data/dataloader.h"
#include "mgpu/nn/models.h"
#include "mgpu/optim/optimizer.h"
#include "pipeline.h"

namespace mgpu::lesson03 {

/// The schedule called `name` ("gpipe", "1f1b" or "naive") for K stages and M micro-batches.
inline Schedule make_schedule(const std::string& name, int K, int M) {
  if (name == "naive") return naive_schedule(K, M);
  return name == "1f1b" ? one_f_one_b_schedule(K, M) : gpipe_schedule(K, M);
}

/// The model line, then one line per stage: its device, its layers and their parameter count.
inline void print_setup(const app::Options& opt, nn::Module& model,
                        const optim::Optimizer& optimizer, Pipeline& pipe,
                        const std::vector<Device>& devices) {
  std::printf("%s; %s\n", app::model_line(opt.model, model.num_parameters()).c_str(),
              optimizer.describe().c_str());
  for (std::size_t k = 0; k < pipe.stages().size(); ++k) {
    const Stage& s = pipe.stages()[k];
    std::ostringstream os;
    std::int64_t params = 0;
    for (std::size_t i = 0; i < s.layers.size(); ++i) {
      os << (i ? ", " : "") << s.layers[i]->describe();
      params += s.layers[i]->num_parameters();
    }
    std::printf("stage %zu on %s: layers %zu-%zu (%s), %lld parameters\n", k,
                devices[k].str().c_str(), s.first_layer, s.first_layer + s.layers.size() - 1,
                os.str().c_str(), static_cast<long long>(params));
  }
}

/// The schedule drawn on its own clock, its idle fraction and the activations it holds.
inline void print_schedule(const Schedule& schedule, std::int64_t batch) {
  const int K = schedule.num_stages, M = schedule.num_micro;
  std::printf("\nschedule '%s', K = %d stages, M = %d micro-batches of ~%lld rows "
              "(batch %lld); on its own clock:\n%s",
              schedule.name.c_str(), K, M, static_cast<long long>(batch / M),
              static_cast<long long>(batch), schedule.draw().c_str());
  std::printf("idle fraction of the schedule: %.3f (GPipe's (K-1)/(M+K-1) = %.3f); activations "
              "held on stage 0: up to %d micro-batches (GPipe %d, 1F1B %d)\n\n",
              schedule.idle_fraction(), static_cast<double>(K - 1) / (M + K - 1),
              max_in_flight(schedule, 0), M, max_in_flight(one_f_one_b_schedule(K, M), 0));
}

/// Busy and idle time per stage and the bubble, summed over steps.
struct StageAverages {
  std::vector<double> busy_ms, idle_ms;
  double span_ms = 0, bubble = 0;
  int steps = 0;
  void add(const StepStats& s) {
    busy_ms.resize(s.busy_us.size(), 0.0);
    idle_ms.resize(s.idle_us.size(), 0.0);
    for (std::size_t k = 0; k < s.busy_us.size(); ++k) {
      busy_ms[k] += s.busy_us[k] / 1000.0;
      idle_ms[k] += s.idle_us[k] / 1000.0;
    }
    span_ms += s.span_us / 1000.0;
    bubble += s.bubble_fraction();
    ++steps;
  }
};

/// Median, min and max of a list of values.
struct Spread {
  double median = 0, min = 0, max = 0;
  explicit Spread(std::vector<double> v) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    min = v.front();
    max = v.back();
  }
};

inline double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/// What one schedule measured over the counted rounds of the sweep.
struct SweepCell {
  std::vector<double> bubble, step_ms;
  std::vector<std::vector<double>> stage_bytes;  // [stage][round]
  std::vector<int> live;                         // most live contexts per stage
  void add(const StepStats& st) {
    bubble.push_back(st.bubble_fraction());
    step_ms.push_back(st.span_us / 1000.0);
    stage_bytes.resize(st.peak_step_bytes.size());
    live.resize(st.peak_live_contexts.size(), 0);
    for (std::size_t k = 0; k < st.peak_step_bytes.size(); ++k) {
      stage_bytes[k].push_back(st.peak_step_bytes[k]);
      live[k] = std::max(live[k], st.peak_live_contexts[k]);
    }
  }
};

/// GPipe against 1F1B, measured: for M = 4, 8, 16 micro-batches of batch / 16 rows each
/// (the batch grows with M, as when M is raised to shrink the bubble), the bubble and each
/// stage's peak memory above what it held before the step. The schedules alternate (GPipe,
/// 1F1B, GPipe, ...) so that the machine's load falls on both alike; medians with min and max
/// over 6 rounds after one uncounted. Writes one JSON line per M to `jsonl` if not empty
/// (tools/plot sweep reads it).
inline int run_sweep(Pipeline& pipe, data::DataLoader& loader, int K, std::int64_t batch,
                     const std::string& jsonl) {
  constexpr int kRounds = 7;
  const std::vector<int> micros = {4, 8, 16};
  const std::int64_t rows = batch / micros.back();
  MGPU_CHECK(rows >= 1, "--sweep: micro-batches of batch / ", micros.back(), " rows need "
             "--batch-size >= ", micros.back(), ", got ", batch);
  std::ofstream out;
  if (!jsonl.empty()) {
    out.open(jsonl);
    MGPU_CHECK(out.good(), "--sweep-jsonl: cannot write '", jsonl, "'");
  }
  double load[3] = {0, 0, 0};
  const bool have_load = getloadavg(load, 3) == 3;
  std::printf("\nGPipe against 1F1B: K = %d stages, micro-batches of %lld rows (a batch of %lld M "
              "rows), %d rounds with the two schedules alternating, the first not counted; "
              "load average %s on %u hardware threads\n", K, static_cast<long long>(rows),
              static_cast<long long>(rows), kRounds,
              have_load ? std::to_string(load[0]).substr(0, 5).c_str() : "unknown",
              std::thread::hardware_concurrency());
  std::printf("  %-6s %3s %6s  %-24s %-26s %-14s %s\n", "sched", "M", "ideal",
              "bubble median [min, max]", "step ms median [min, max]", "live contexts",
              "peak MiB per stage above the step's start (median)");
  loader.start_epoch(0);
  data::Batch b;
  for (int M : micros) {
    const Schedule gpipe = gpipe_schedule(K, M), one_f = one_f_one_b_schedule(K, M);
    SweepCell cells[2];
    for (int round = 0; round < kRounds; ++round) {
      if (!loader.next(b)) {  // the epoch ran out: start another
        loader.start_epoch(round + 1);
        loader.next(b);
      }
      const Tensor x = b.inputs.slice(0, rows * M), labels = b.labels.slice(0, rows * M);
      for (int i = 0; i < 2; ++i) {
        const StepStats st = pipe.train_step(x, labels, i == 0 ? gpipe : one_f);
        if (round > 0) cells[i].add(st);  // the first round pays for allocations
      }
    }
    const double ideal = static_cast<double>(K - 1) / (M + K - 1);
    std::ostringstream line;
    line << "{\"label\": \"M=" << M << "\", \"x\": " << M << ", \"ideal_bubble\": " << ideal;
    for (int i = 0; i < 2; ++i) {
      const char* name = i == 0 ? "gpipe" : "1f1b";
      const Spread bubble(cells[i].bubble), step(cells[i].step_ms);
      std::string live, mem;
      for (std::size_t k = 0; k < cells[i].live.size(); ++k) {
        live += (k ? " " : "") + std::to_string(cells[i].live[k]);
        char buf[32];
        const double m = mib(Spread(cells[i].stage_bytes[k]).median);
        std::snprintf(buf, sizeof buf, "%s%.2f", k ? " " : "", m);
        mem += buf;
        line << ", \"" << name << "_stage" << k << "_mib\": " << m;
      }
      std::printf("  %-6s %3d %6.3f  %.3f [%.3f, %.3f]       %7.2f [%.2f, %.2f]   %-14s %s\n",
                  name, M, ideal, bubble.median, bubble.min, bubble.max, step.median, step.min,
                  step.max, live.c_str(), mem.c_str());
      line << ", \"" << name << "_bubble\": " << bubble.median << ", \"" << name
           << "_step_ms\": " << step.median;
    }
    if (out.is_open()) out << line.str() << "}\n";
  }
  std::printf("ideal: (K-1)/(M+K-1), the idle slots of both schedules on their own clock; bubble: "
              "idle time / (K x step time), measured; live contexts: the most micro-batches a "
              "stage's layers held at once\n");
  return 0;
}

/// The last step's timeline, the averages per stage, the bubble and the peak memory.
inline void print_report(const StepStats& last, const StageAverages& avg, const Schedule& schedule,
                         const std::vector<Device>& devices) {
  const int K = static_cast<int>(devices.size());
  std::printf("\nthe last step, measured (F/B: forward/backward most of a column, f/b: part of "
              "it, . idle):\n%s", draw_timeline(last, K).c_str());
  if (avg.steps > 0) {
    std::printf("per stage, averaged over %d steps:", avg.steps);
    for (int k = 0; k < K; ++k)
      std::printf("  stage %d busy %.2f ms idle %.2f ms", k, avg.busy_ms[k] / avg.steps,
                  avg.idle_ms[k] / avg.steps);
    std::printf("\nbubble: measured %.3f of %d x %.2f ms; the schedule's own clock says %.3f\n",
                avg.bubble / avg.steps, K, avg.span_ms / avg.steps, schedule.idle_fraction());
  }
  std::printf("the last step, per stage: most live contexts and peak memory above the step's start:");
  for (int k = 0; k < K && k < static_cast<int>(last.peak_live_contexts.size()); ++k)
    std::printf("  stage %d %d, %.2f MiB", k, last.peak_live_contexts.at(k),
                mib(last.peak_step_bytes.at(k)));
  std::printf("\npeak memory per device in the last step:");
  for (const Device& d : devices)
    std::printf("  %s %.2f MiB", d.str().c_str(),
                mib(static_cast<double>(memory_stats(d).peak_allocated)));
  std::printf("\n");
}

}  // namespace mgpu::lesson03
