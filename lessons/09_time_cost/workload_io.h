/// @file workload_io.h
/// @brief Lesson 09: the files the model reads (provided; nothing to write here). A one-rank
/// run's metrics become a Workload, bench_allreduce's CSV becomes an AlphaBeta, a JSON table
/// describes hardware we do not have.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/perf/time_cost.h"

namespace mgpu::lesson09 {

/// The Workload of a one-rank run's `train --breakdown` file: the mean forward and backward
/// per sample of its measured steps, the rest of the step as fixed time, and its buckets
/// (bytes, and the mean share of backward done when each was launched). `batch` gets the
/// run's per-rank batch. Throws mgpu::Error naming the file and what is missing.
perf::Workload read_workload(const std::string& metrics_path, std::int64_t* batch);

/// alpha and beta fitted (lesson 04's fit_alpha_beta) to the library all_reduce column of
/// a bench_allreduce --csv file measured with `ranks` ranks.
perf::AlphaBeta fit_link_from_csv(const std::string& csv_path, int ranks);

/// One measured step time: mode "weak" or "strong", ranks, per-rank batch, seconds.
struct MeasuredRun {
  std::string mode;                ///< "weak" or "strong"
  int ranks = 1;                   ///< world size
  std::int64_t batch_per_rank = 0; ///< samples per rank per step
  double step_s = 0;               ///< seconds per step
};
/// JSON lines with mode, world_size, batch_per_rank, step_ms.
std::vector<MeasuredRun> read_measured_runs(const std::string& path);
/// The run with this mode, ranks and batch, or nullptr.
const MeasuredRun* find_run(const std::vector<MeasuredRun>& runs, const std::string& mode,
                            int ranks, std::int64_t batch_per_rank);

/// A model of the what-if table: its size, its compute, the batch it runs with.
struct ModelSpec {
  std::string name;                 ///< e.g. "lesson 01's CNN"
  double parameters = 0;            ///< f32 gradients: 4 bytes each
  double flops_per_sample = 0;      ///< forward + backward
  std::int64_t batch_per_rank = 64; ///< samples per GPU per step
};
/// hardware.json: the device's assumed compute, the clusters, the models.
struct HardwareTable {
  std::string device_name;       ///< the GPU the compute figures assume
  double sustained_tflops = 0;   ///< FLOP/s reached on the models, in TFLOP/s
  double step_floor_s = 0;       ///< per-step time no model goes below (kernel launches)
  std::vector<perf::Hardware> hardware;  ///< the clusters
  std::vector<ModelSpec> models;   ///< the models
};
/// Reads hardware.json (see lessons/09_time_cost/hardware.json for the fields).
HardwareTable read_hardware_table(const std::string& path);

/// The Workload of `spec` on the table's device: compute from its FLOPs (a third forward,
/// two thirds backward), the step floor as fixed time, and buckets as DDP makes them by
/// default (1 MiB first, then 25 MiB), ready in proportion to the bytes before them. When
/// `measured` has as many gradient bytes as `spec`, its buckets and ready shares are used.
perf::Workload workload_on_device(const ModelSpec& spec, const HardwareTable& table,
                                  const perf::Workload* measured);

}  // namespace mgpu::lesson09
