/// @file train_report.h
/// @brief What lesson 03's program prints around its training loop: the stages, the
/// schedule on its own clock, the bubble sweep, and the closing report (the last step's
/// timeline, busy and idle time per stage, the measured bubble, peak memory).
/// Program-only: the tests do not use it.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/data/dataloader.h"
#include "pipeline.h"

namespace mgpu::lesson03 {

/// The schedule called `name` ("gpipe" or "naive") for K stages and M micro-batches.
inline Schedule make_schedule(const std::string& name, int K, int M) {
  return name == "naive" ? naive_schedule(K, M) : gpipe_schedule(K, M);
}

/// One line per stage: its device, its layers and their parameter count.
inline void print_stages(Pipeline& pipe, const std::vector<Device>& devices) {
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
              "held per stage: up to %d micro-batches (1F1B would hold %d on stage 0)\n\n",
              schedule.idle_fraction(), static_cast<double>(K - 1) / (M + K - 1),
              max_in_flight(schedule, 0), max_in_flight(one_f_one_b_schedule(K, M), 0));
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

/// The pipeline's central trade-off, measured: more micro-batches shrink the bubble.
inline int run_sweep(Pipeline& pipe, data::DataLoader& loader, int K, std::int64_t batch) {
  std::printf("\nbubble sweep (batch %lld, %d stages, 6 steps each, the first not counted):\n",
              static_cast<long long>(batch), K);
  std::printf("  %-8s %4s %12s %12s %10s\n", "schedule", "M", "ideal", "measured", "step ms");
  std::vector<std::pair<std::string, int>> runs = {{"naive", 1}};
  for (int M : {1, 2, 4, 8, 16, 32})
    if (M <= batch) runs.push_back({"gpipe", M});
  loader.start_epoch(0);
  data::Batch b;
  for (const auto& [name, M] : runs) {
    const Schedule s = make_schedule(name, K, M);
    StageAverages avg;
    for (int i = 0; i < 6; ++i) {
      if (!loader.next(b)) {  // the epoch ran out: start another
        loader.start_epoch(1);
        loader.next(b);
      }
      const StepStats st = pipe.train_step(b.inputs, b.labels, s);
      if (i > 0) avg.add(st);  // the first pays for allocations
    }
    std::printf("  %-8s %4d %12.3f %12.3f %10.2f\n", name.c_str(), M, s.idle_fraction(),
                avg.bubble / avg.steps, avg.span_ms / avg.steps);
  }
  std::printf("ideal: the schedule's idle slots on its own clock ((K-1)/(M+K-1) for GPipe, "
              "(K-1)/K for naive); measured: idle time / (K x step time)\n");
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
  std::printf("peak memory per device (after the first step):");
  for (const Device& d : devices)
    std::printf("  %s %.2f MiB", d.str().c_str(),
                static_cast<double>(memory_stats(d).peak_allocated) / (1024.0 * 1024.0));
  std::printf("\n");
}

}  // namespace mgpu::lesson03
