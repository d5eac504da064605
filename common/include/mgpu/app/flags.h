/// @file flags.h
/// @brief The flags every program shares (DESIGN.md §8), declared once.
///
/// A program fills an Options with its own defaults, declares the shared flags with
/// add_flags(), adds its own flags to the same CLI::App, and parses:
///
///     app::Options opt;
///     opt.epochs = 2;                              // this program's defaults
///     CLI::App cli{"Lesson 02: ..."};
///     app::add_flags(cli, opt, {{"mlp-bn", "mlp", "cnn-small", "cnn"}});
///     cli.add_flag("--sweep", sweep, "...");       // its own flags
///     MGPU_PARSE_FLAGS(cli, argc, argv);
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mgpu::app {

/// The values of the shared flags. A program sets its defaults before add_flags().
struct Options {
  std::string data;                 ///< --data: a Fashion-MNIST folder, or "synthetic"
  std::string model = "mlp";        ///< --model: a name of nn::model_catalog()
  int epochs = 10;                  ///< --epochs: passes over the training set
  std::int64_t batch_size = 64;     ///< --batch-size: samples per step per rank
  double lr = 0.01;                 ///< --lr: learning rate (of the first epoch)
  std::string schedule = "constant";  ///< --schedule: learning rate per epoch (cosine|constant)
  double momentum = 0.9;            ///< --momentum: SGD momentum
  double weight_decay = 0.0;        ///< --weight-decay: SGD's (L2) or AdamW's (decoupled)
  std::pair<double, double> betas{0.9, 0.999};  ///< --betas: AdamW's (beta1, beta2)
  std::uint64_t seed = 0;           ///< --seed: initial weights and shuffling
  std::string device = "cpu";       ///< --device: cpu, cuda, cuda:N, or a list
  std::string backend = "auto";     ///< --backend: auto|mpi|nccl (multi-rank programs)
  std::int64_t train_samples = 0;   ///< --train-samples: use the first N (0: all)
  std::int64_t steps = 0;           ///< --steps: at most N steps per epoch (0: all)
  std::string metrics;              ///< --metrics: JSON lines, one per epoch
  std::string trace;                ///< --trace: a Chrome trace of the run
  Options();                        ///< data = the Debian Fashion-MNIST folder
};

/// Which shared flags a program takes beyond the ones every program has (--data, --model,
/// --epochs, --batch-size, --lr, --momentum or --betas, --weight-decay, --seed, --device,
/// --train-samples, --steps, --metrics, --trace).
struct FlagSet {
  /// The --model names it accepts (nn::model_catalog()); by default the five that train on
  /// one device or many alike (wide-mlp is for lessons that need several DDP buckets).
  std::vector<std::string> models{"mlp", "cnn", "mlp-bn", "deep-mlp", "cnn-small"};
  bool lr_schedule = false;         ///< --schedule cosine|constant
  /// A program started with mpirun: --backend, and --device help that says how "cuda"
  /// binds each rank to its own GPU.
  bool backend = false;
  bool device_list = false;         ///< --device takes a list ("cpu:0,cpu:1"); --devices too
  /// --help text of --device; empty: the single-process or the rank text (see `backend`).
  std::string device_help;
  /// The program trains with AdamW: --betas instead of SGD's --momentum, and
  /// --weight-decay is AdamW's decoupled decay.
  bool adamw = false;
  /// --help text of --batch-size
  std::string batch_help = "samples per step on each rank (the global batch is this times the ranks)";
};

/// Declares the shared flags on `cli`, bound to `opt`, with `opt`'s values as the defaults
/// shown by --help. Numbers are checked as they are parsed and refused with a one-line
/// message ("--epochs: must be a positive integer, got '0'").
void add_flags(CLI::App& cli, Options& opt, const FlagSet& which);

/// The learning rate of epoch `epoch` (0-based): opt.lr for "constant"; for "cosine" a half
/// cosine from opt.lr down towards 0 over opt.epochs (large steps while far from a minimum,
/// small ones to settle into it).
double learning_rate(const Options& opt, int epoch);

/// The checkpoint flags of the programs that save and resume (lessons 07 and 08).
struct CheckpointFlags {
  std::string dir;              ///< --checkpoint-dir: the checkpoints and `latest`
  std::int64_t save_every = 0;  ///< --save-every: steps; 0: at the end of every epoch
  int keep_last = 3;            ///< --keep-last: the newest K are kept (0: all)
  std::string resume;           ///< --resume: a checkpoint file, a folder, or "auto" (= dir)
  /// --allow-non-finite-checkpoint: load a checkpoint whose parameters or optimizer state
  /// hold NaN or infinity (refused by default; for debugging a diverged run).
  bool allow_non_finite = false;
};

/// Declares --checkpoint-dir, --save-every, --keep-last, --resume and
/// --allow-non-finite-checkpoint on `cli`.
void add_checkpoint_flags(CLI::App& cli, CheckpointFlags& ck);

/// After parsing: false, with a one-line error on stderr, when the flags contradict each
/// other (--resume auto without --checkpoint-dir).
bool checkpoint_flags_ok(const CheckpointFlags& ck);

/// Validators with plain messages, for a program's own flags too.
/// An integer in [1, max].
CLI::Validator positive_integer(std::int64_t max = 2147483647);
/// An integer in [0, max].
CLI::Validator non_negative_integer(std::int64_t max = 2147483647);
/// A real number in [low, high].
CLI::Validator real_in(double low, double high);
/// A real number in [low, high): at least low, below high.
CLI::Validator real_below(double low, double high);
/// A real number >= 0.
CLI::Validator non_negative_real();
/// A real number > 0.
CLI::Validator positive_real();

/// Parses the command line: -1 when the program goes on, else the exit status to return
/// (0 after --help, CLI11's code for a wrong flag). Under mpirun every rank parses the same
/// flags and finds the same error, so only the launcher's rank 0 prints the help or the
/// error: one message, not one per rank. Use it through MGPU_PARSE_FLAGS.
int parse_flags(CLI::App& cli, int argc, char** argv);

}  // namespace mgpu::app

/// CLI11_PARSE for mgpu-lab's programs: parses with mgpu::app::parse_flags and returns from
/// main with its exit status when the program should stop (--help, a wrong flag).
#define MGPU_PARSE_FLAGS(cli, argc, argv)                                    \
  do {                                                                       \
    const int mgpu_parse_status_ = ::mgpu::app::parse_flags(cli, argc, argv); \
    if (mgpu_parse_status_ >= 0) return mgpu_parse_status_;                  \
  } while (0)
