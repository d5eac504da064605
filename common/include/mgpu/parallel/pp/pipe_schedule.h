/// @file pipe_schedule.h
/// @brief Pipeline schedules across processes: the order in which each pipeline rank runs
/// the forwards and backwards of its micro-batches, and the clock that measures their bubble.
///
/// p pipeline ranks, m micro-batches, v model chunks per rank (virtual stages). The model's
/// blocks are cut into p·v consecutive pieces; rank r holds pieces r, r + p, r + 2p, ...
/// (chunk c of rank r is virtual stage c·p + r), so a micro-batch goes around the ranks v
/// times (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
/// Clusters Using Megatron-LM"). With v = 1 this is the plain pipeline of lesson 03.
///
/// On a clock where every op (one chunk's forward or backward of one micro-batch) takes one
/// tick, each rank is busy 2·m·v ticks; GPipe and 1F1B idle 2(p-1) ticks of a full stage
/// while the pipeline fills and drains, interleaved 1F1B 2(p-1) ticks of a chunk, v times
/// shorter. The bubble, idle over busy time:
///
///     GPipe, 1F1B:       (p - 1) / m          interleaved 1F1B:   (p - 1) / (v·m)
///
/// Lesson 03 defines one_f_one_b_order (task 4, lessons/03_model_parallel/one_f_one_b.cpp)
/// and lesson 15 interleaved_order (task 2, lessons/15_3d_parallel/interleaved_order.cpp);
/// the library compiles their reference. The rest is pipe_schedule.cpp's.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mgpu::parallel::pp {

/// Forward or backward.
enum class Pass { forward, backward };

/// One unit of a rank's work: the forward or backward of micro-batch `micro` through its
/// model chunk `chunk` (0 <= chunk < v).
struct PipeOp {
  Pass pass = Pass::forward;  ///< which direction
  int micro = 0;              ///< micro-batch 0..m-1
  int chunk = 0;              ///< this rank's model chunk 0..v-1
  /// Same op.
  bool operator==(const PipeOp& o) const {
    return pass == o.pass && micro == o.micro && chunk == o.chunk;
  }
  /// "F3" or "B3" (v = 1), "F3.1" (micro 3, chunk 1) otherwise.
  std::string str(int v = 1) const;
};

/// The schedules of this library.
enum class ScheduleKind { gpipe, one_f_one_b, interleaved };
/// "gpipe", "1f1b" or "interleaved".
const char* schedule_name(ScheduleKind kind);
/// The kind named "gpipe", "1f1b" or "interleaved"; throws for any other name.
ScheduleKind parse_schedule(const std::string& name);

/// The virtual stage chunk `chunk` of rank `rank` is: chunk·p + rank.
inline int virtual_stage(int p, int rank, int chunk) { return chunk * p + rank; }

/// GPipe on rank `rank` of p (v = 1): every forward, then every backward in reverse order
/// (lesson 03's, as an order).
std::vector<PipeOp> gpipe_order(int p, int m, int rank);

// ---- Lesson 03, task 4: the 1F1B order (lessons/03_model_parallel/one_f_one_b.cpp) ------------

/// 1F1B on rank `rank` of p (v = 1), one forward and one backward: min(p - 1 - rank, m)
/// warm-up forwards, then one forward and one backward while forwards remain, then the
/// remaining backwards; forwards and backwards each in micro-batch order, so the rank holds
/// at most min(p - rank, m) micro-batches at once. Throws unless p >= 1, m >= 1 and
/// 0 <= rank < p.
std::vector<PipeOp> one_f_one_b_order(int p, int m, int rank);

// ---- Lesson 15, task 2: the interleaved schedule's order (interleaved_order.cpp) ---------------

/// Interleaved 1F1B (Megatron-LM's schedule with v model chunks per rank) on rank `rank`:
/// the m·v forwards and m·v backwards of its chunks in the order it runs them. Forwards go
/// in groups of p micro-batches per chunk (chunk 0's first p micro-batches, chunk 1's same
/// p, ..., then the next p), backwards the same groups with the chunks in reverse; a
/// warm-up of min(2(p - 1 - rank) + (v - 1)·p, m·v) forwards, then one forward and one
/// backward while forwards remain, then the remaining backwards. Throws unless p >= 1,
/// v >= 1, 0 <= rank < p, m >= 1 and, when v > 1, p divides m.
std::vector<PipeOp> interleaved_order(int p, int v, int m, int rank);

// ---- Orders checked and put on the clock (common/src/parallel/pp/pipe_schedule.cpp) --------

/// The order of `kind` on rank `rank` (v must be 1 for gpipe and 1f1b).
std::vector<PipeOp> schedule_order(ScheduleKind kind, int p, int v, int m, int rank);

/// Throws, naming the rank and op, unless `orders` (one per rank) is a valid pipeline
/// schedule of p ranks, v chunks and m micro-batches: every (pass, micro, chunk) exactly once
/// on each rank, and on each rank every micro-batch's forward through a chunk before its
/// backward through it. Dependencies across ranks are checked by simulate().
void check_orders(const std::vector<std::vector<PipeOp>>& orders, int p, int v, int m);

/// The orders run on a clock: each op takes one tick and starts at the first tick at which
/// the rank is free and its input is there (the forward through virtual stage s after the
/// forward through s - 1 ended; the backward through s after the backward through s + 1, or
/// on the last virtual stage after its own forward).
struct Timeline {
  int p = 0;  ///< pipeline ranks
  int v = 1;  ///< chunks per rank
  int m = 0;  ///< micro-batches
  /// slots[r][t]: what rank r does at tick t (nullopt: idle). Every row has span() ticks.
  std::vector<std::vector<std::optional<PipeOp>>> slots;
  /// Ticks from the first op's start to the last op's end.
  int span() const { return slots.empty() ? 0 : static_cast<int>(slots[0].size()); }
  /// Idle (rank, tick) slots.
  long idle_slots() const;
  /// Busy slots: 2·m·v per rank.
  long busy_slots() const;
  /// Idle over busy: the bubble as the formula counts it.
  double bubble() const { return static_cast<double>(idle_slots()) / static_cast<double>(busy_slots()); }
  /// One row per rank: "F0 F1 .  B0 ..." (ops named as PipeOp::str).
  std::string draw() const;
};

/// Runs the orders on the clock (check_orders first). Throws when they deadlock: a rank's
/// next op waits for an op that never runs, named in the message.
Timeline simulate(const std::vector<std::vector<PipeOp>>& orders, int p, int v, int m);

/// (p - 1) / (v·m): the bubble of GPipe, 1F1B (v = 1) and interleaved 1F1B.
inline double bubble_formula(int p, int v, int m) {
  return static_cast<double>(p - 1) / (static_cast<double>(v) * m);
}

}  // namespace mgpu::parallel::pp
