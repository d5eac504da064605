/// @file report.h
/// @brief What a program reports per epoch: the epoch line, the metrics JSON line, and the
/// closing `final:` line (DESIGN.md §8).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace mgpu::app {

/// One epoch's numbers, over every rank.
struct EpochStats {
  int epoch = 0;            ///< 1-based
  int epochs = 0;           ///< in the run
  double lr = 0;            ///< learning rate of the epoch
  double train_loss = 0;    ///< mean over the epoch's training samples
  bool has_train_acc = true;  ///< false where the step does not see the logits
  double train_acc = 0;     ///< fraction of training samples classified right
  double test_loss = 0;     ///< mean over the test set
  double test_acc = 0;      ///< fraction of the test set classified right
  double samples_per_s = 0; ///< training samples of every rank per second of training
  double step_ms = 0;       ///< training time per step
  double data_wait_s = 0;   ///< time the step loop waited for batches (rank 0)
  int world_size = 1;       ///< ranks
  std::int64_t global_batch = 0;  ///< samples per step over every rank
  double time_s = 0;        ///< since the run started
};

/// "epoch 2/10: lr=0.01 train_loss=0.4213 train_acc=0.8512 test_loss=... test_acc=...
/// samples_per_s=... step_ms=... data_wait_s=... world_size=1 time_s=..."
std::string epoch_line(const EpochStats& s);

/// "final: test_acc=0.8811 train_loss=0.2633 samples_per_s=9890 time_s=50.3": the last
/// epoch's accuracy and loss, samples per second of training over the whole run.
std::string final_line(double test_acc, double train_loss, double samples_per_s, double time_s);

/// "batch: 64 per rank, global 128 (2 rank(s)); 30000 samples and 469 steps per rank per
/// epoch": `batch` samples per step on each of `data_parallel` ranks that read different
/// samples, out of `world`; where they differ, each data-parallel replica is a group of
/// world / data_parallel ranks that read the same batch, and the line says so. `samples`
/// and `steps` are one rank's (one replica's) per epoch; a `note` ends the line.
std::string batch_line(std::int64_t batch, int data_parallel, int world, std::int64_t samples,
                       std::int64_t steps, const std::string& note = "");

/// "model: mlp (784-256-128-10 MLP), 235146 parameters": the start of every program's model
/// line (nn::model_summary of `name`); `what` names the parameters ("fp32 parameters").
std::string model_line(const std::string& name, std::int64_t parameters,
                       const std::string& what = "parameters");

/// "1.79 MiB": `bytes` in MiB with `decimals` decimals.
std::string mib(double bytes, int decimals = 2);

/// Extra fields a program adds to each metrics line ({"stages", 2}).
using MetricFields = std::vector<std::pair<std::string, double>>;

/// --metrics PATH: one JSON object per epoch with the fields of EpochStats (epoch, lr,
/// train_loss, train_acc, test_loss, test_acc, samples_per_s, step_ms, data_wait_s,
/// world_size, global_batch, time_s) and the program's extra fields. Each write replaces
/// the file atomically with every line so far (io::atomic_replace: a temporary file renamed
/// over the path), so a run that stops early keeps the epochs it finished, and a full disk
/// leaves the previous complete file, never a truncated one.
class MetricsWriter {
 public:
  /// Checks now that `path` can be written (io::probe_writable), so a bad path fails before
  /// training; the file appears with the first line.
  void open(const std::string& path);
  /// True after open().
  bool on() const { return !path_.empty(); }
  /// Adds one line.
  void write(const EpochStats& s, const MetricFields& extra = {});

 private:
  std::string path_;
  std::string text_;  // every line so far
};

}  // namespace mgpu::app
