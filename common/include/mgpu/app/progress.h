/// @file progress.h
/// @brief The progress line: one self-overwriting line while an epoch trains.
#pragma once

#include <cstdint>

namespace mgpu::app {

/// "epoch 2/10  step 310/938  loss 0.4123  9850 samples/s  ETA 4m12s", redrawn in place
/// (carriage return) at most four times a second, on rank 0 only and only when stdout is
/// a terminal, so logs and pipes get the epoch lines alone.
///
/// Under mpirun a rank's stdout is a pseudo-terminal even when mpirun's own output goes to
/// a file, so there the line is off unless MGPU_PROGRESS=1; MGPU_PROGRESS=0 turns it off
/// everywhere.
class ProgressLine {
 public:
  /// Decides once whether the line is shown (see the class comment).
  ProgressLine();
  /// True when the line is drawn.
  bool shown() const { return shown_; }
  /// Starts an epoch of `steps` steps, `epochs` in the run.
  void start_epoch(int epoch, int epochs, std::int64_t steps);
  /// After each step: steps done in this epoch, the mean loss so far, samples per second
  /// (of every rank), and the estimated seconds left in the run's training.
  void update(std::int64_t step, double loss, double samples_per_s, double eta_s);
  /// Erases the line (before the epoch line is printed).
  void clear();

 private:
  bool shown_ = false, drawn_ = false;
  int epoch_ = 0, epochs_ = 0;
  std::int64_t steps_ = 0;
  double last_draw_s_ = 0;
};

}  // namespace mgpu::app
