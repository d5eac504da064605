/// @file time_cost.h
/// @brief A performance model of a data-parallel training step: where a step's time goes,
/// and a model that predicts it for more ranks and other hardware. Every function is pure:
/// times in, numbers out. Lesson 09 defines the functions of tasks 1-4
/// (lessons/09_time_cost/: the file of each below); the library compiles their reference
/// (solutions/09_time_cost/).
///
///   task 1  split_communication  (exposed.cpp)     union of the buckets' all-reduces, split
///                                                  into hidden (under compute) and exposed
///   task 2  scaling_efficiency,  (scaling.cpp)     E(N) = T1 / (N TN) per sample; one step's
///           step_phases                            phases from its timestamps
///   task 3  predict_step         (step_model.cpp)  the alpha-beta-compute model with overlap
///   task 4  effective_link,      (what_if.cpp)     a hardware description -> alpha and beta,
///           what_if                                and the model's verdict on it
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/error.h"  // mgpu::Error, MGPU_CHECK
#include "mgpu/perf/link_model.h"  // AlphaBeta, ring_allreduce_seconds

namespace mgpu::perf {

/// A span of time [begin, end] in seconds on one rank's clock.
struct Interval {
  double begin = 0;  ///< start, seconds
  double end = 0;    ///< end, seconds (>= begin)
  /// end - begin.
  double length() const { return end - begin; }
};

// ---- Task 1: exposed communication (exposed.cpp) --------------------------------------------

/// How a step's communication relates to its compute.
struct CommSplit {
  double busy_s = 0;     ///< time during which at least one bucket's all-reduce was in flight
  double hidden_s = 0;   ///< the part of busy_s inside the compute window
  double exposed_s = 0;  ///< busy_s - hidden_s: communication no computation ran under
};

/// Task 1. `buckets` holds each bucket's all-reduce, launch to completion, in any order;
/// they may overlap (two buckets in flight at once count once). `compute` is the window
/// the communication can hide behind (DDP: backward). busy_s is the length of the union
/// of the intervals, hidden_s the length of the union's intersection with `compute`.
/// Example: buckets [1,3] [2,5] [7,8], compute [0,4]: union [1,5] [7,8], busy 5,
/// hidden 3 ([1,4]), exposed 2. Throws mgpu::Error, naming the bucket, for an interval
/// that ends before it begins (and for such a compute window).
CommSplit split_communication(const std::vector<Interval>& buckets, Interval compute);

// ---- Task 2: scaling efficiency and the phases of a step (scaling.cpp) ----------------------

/// One measured configuration: `ranks` processes, `global_batch` samples per step in all
/// (per-rank batch times ranks), `step_s` seconds per step.
struct Run {
  int ranks = 1;                  ///< processes (devices)
  std::int64_t global_batch = 0;  ///< samples per step, all ranks together
  double step_s = 0;              ///< seconds per step
};

/// Task 2a. Scaling efficiency per sample: E(N) = T1 / (N * TN), where T is the time per
/// sample (step_s / global_batch) of the one-rank run and of the N-rank run. 1 is perfect;
/// 0.5 means N ranks train only N/2 times as fast as one. The same formula serves weak
/// scaling (per-rank batch fixed: global batch N*B) and strong scaling (global batch fixed).
/// Throws mgpu::Error when `one` is not a one-rank run or a value is not positive.
double scaling_efficiency(const Run& one, const Run& n);

/// What one rank recorded during one step: its phases as intervals on its clock, and each
/// bucket's all-reduce. A phase that did not happen is an empty interval ({t, t}).
struct StepRecord {
  Interval step;                 ///< the whole step
  Interval data_wait;            ///< waiting for the DataLoader's next batch
  Interval h2d;                  ///< copying the batch to the device
  Interval forward;              ///< forward and loss
  Interval backward;             ///< backward (gradient hooks launch the buckets)
  Interval optimizer;            ///< optimizer step
  std::vector<Interval> buckets; ///< each bucket's all-reduce, launch to completion
};

/// A step's time, phase by phase (seconds).
struct Phases {
  double data_wait = 0;     ///< waiting for data
  double h2d = 0;           ///< host-to-device copy
  double forward = 0;       ///< forward and loss
  double backward = 0;      ///< backward
  double exposed_comm = 0;  ///< communication not hidden behind backward
  double optimizer = 0;     ///< optimizer step
  double other = 0;         ///< the rest of the step (waiting between phases, bookkeeping)
  /// The sum of all phases: the step's time.
  double total() const;
};

/// Task 2b. The phases of one step: the length of each measured phase, the exposed
/// communication (task 1 with backward as the compute window), and other = the step's
/// length minus all of these. A negative `other` means the phases overlap each other or
/// stick out of the step: throw mgpu::Error saying so (1 ns of rounding is tolerated and
/// gives other = 0).
Phases step_phases(const StepRecord& record);

/// The mean of each phase over `steps` (all zero for none).
Phases mean_phases(const std::vector<Phases>& steps);

// ---- Task 3: the alpha-beta-compute model (step_model.cpp) ------------------------------------

/// What the model needs to know about one training step of a model, per rank.
struct Workload {
  double forward_s_per_sample = 0;   ///< forward time per sample on one device
  double backward_s_per_sample = 0;  ///< backward time per sample on one device
  double fixed_s = 0;                ///< per step, independent of the batch (optimizer, data, ...)
  std::vector<double> bucket_bytes;  ///< gradient bytes of each bucket, in launch order
  /// For each bucket, the fraction of backward that has run when it is ready (0..1,
  /// non-decreasing): its all-reduce cannot start earlier.
  std::vector<double> bucket_ready;
};

/// The model's prediction for one step.
struct StepPrediction {
  double compute_s = 0;  ///< forward + backward
  double comm_s = 0;     ///< sum of the buckets' all-reduce times
  double exposed_s = 0;  ///< the part of the communication that ends after backward
  double step_s = 0;     ///< fixed + compute + exposed
  double samples_per_s = 0;  ///< ranks * batch / step_s
};

/// Task 3. The step time on `ranks` ranks with `batch_per_rank` samples each:
///   forward = batch * forward_s_per_sample, backward = batch * backward_s_per_sample;
///   bucket k is ready at bucket_ready[k] * backward (time 0 = start of backward) and its
///   all-reduce takes ring_allreduce_seconds(link, bucket_bytes[k], ranks); the buckets use
///   one communication channel in launch order, so bucket k starts at
///   max(its ready time, the end of bucket k-1);
///   exposed = max(0, end of the last bucket - backward); step = fixed + forward +
///   backward + exposed. One rank communicates nothing (the ring formula gives 0).
/// Throws mgpu::Error for ranks < 1, batch < 1, bucket lists of different lengths, or
/// ready fractions outside [0, 1] or decreasing.
StepPrediction predict_step(const Workload& w, std::int64_t batch_per_rank, int ranks,
                            const AlphaBeta& link);

// ---- Task 4: what if we had other hardware (what_if.cpp) --------------------------------------

/// A cluster, described the way vendors and nccl-tests describe one.
struct Hardware {
  std::string name;             ///< e.g. "8x H100, NVLink"
  int nodes = 1;                ///< machines
  int gpus_per_node = 1;        ///< devices per machine (one rank each)
  double intra_busbw = 0;       ///< all-reduce bus bandwidth inside a node, bytes/s (nccl-tests busbw)
  double intra_latency_s = 0;   ///< latency of one ring step inside a node, seconds
  double inter_bw = 0;          ///< network bandwidth of one node (all its NICs), bytes/s each way
  double inter_latency_s = 0;   ///< latency of one ring step between nodes, seconds
  /// Ranks in all: nodes * gpus_per_node.
  int ranks() const { return nodes * gpus_per_node; }
};

/// The model's verdict on one hardware.
struct WhatIf {
  AlphaBeta link;              ///< effective_link(hardware)
  StepPrediction step;         ///< predict_step on hardware.ranks() ranks
  double efficiency = 0;       ///< weak scaling: the one-device step time / step.step_s
  std::string bottleneck;      ///< "compute", "latency" or "bandwidth" (see what_if)
};

/// Task 4a. The alpha and beta of one ring over all ranks of `hw`. Every step of a ring
/// moves data over every hop at once, so the slowest hop sets the pace: on one node,
/// alpha = intra_latency_s and beta = 1 / intra_busbw; across nodes the ring also crosses
/// the network, so alpha = the larger latency and beta = 1 / the smaller bandwidth.
/// Throws mgpu::Error for a description without positive counts and bandwidths (the
/// network's only matters when nodes > 1).
AlphaBeta effective_link(const Hardware& hw);

/// Task 4b. The model on `hw`: link = effective_link(hw), step = predict_step(w,
/// batch_per_rank, hw.ranks(), link), efficiency = predict_step on one rank's step_s over
/// step.step_s. bottleneck: "compute" when the exposed communication is under 5% of the
/// step; otherwise "latency" when the buckets' latency terms (sum over buckets of
/// 2(N-1) alpha) exceed their bandwidth terms (sum of 2(N-1)/N bytes beta), else "bandwidth".
WhatIf what_if(const Workload& w, const Hardware& hw, std::int64_t batch_per_rank);

}  // namespace mgpu::perf
