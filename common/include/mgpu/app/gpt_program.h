/// @file gpt_program.h
/// @brief What the parallel GPT programs (lessons 13-15) share: their common flags, the
/// corpus they name, the unsplit model trained beside the split one (--check), and the
/// lines that compare the two. Each program keeps its plan's flags and its loop.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/data/text.h"
#include "mgpu/device.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/tensor.h"

namespace mgpu::app {

/// The flags every GPT program takes (defaults: the program's).
struct GptProgramFlags {
  std::string data = "synthetic";  ///< synthetic, shakespeare or a text file
  std::int64_t steps = 10;         ///< optimizer steps
  std::int64_t batch = 4;          ///< windows per step
  std::int64_t seq = 64;           ///< tokens per window (T)
  double lr = 1e-3;                ///< AdamW's learning rate
  std::uint64_t seed = 1337;       ///< weights and batches
  bool check = true;               ///< also train the unsplit model, print both losses
  std::string dtype = "f32";       ///< f32 or f64
  std::string device = "cpu";      ///< cpu, or cuda (each rank the GPU of its local rank)
  std::string backend = "auto";    ///< the grid's groups: auto, mpi or nccl
  /// The dtype named by --dtype.
  DType value_dtype() const { return dtype == "f64" ? DType::f64 : DType::f32; }
};

/// The largest --batch-size the GPT programs take (a step's tokens fit in memory).
inline constexpr std::int64_t kMaxGptBatch = 1 << 16;
/// The largest --seq the GPT programs take.
inline constexpr std::int64_t kMaxGptSeq = 1 << 16;
/// The largest extent of one grid dimension (--dp, --tp, --pp, --cp, --virtual, --micro).
inline constexpr std::int64_t kMaxGridExtent = 1 << 16;

/// Declares --data, --steps, --batch-size (`batch_help`), --seq (`seq_help`), --lr,
/// --seed, --check/--no-check, --dtype, --device and --backend on `cli`, bound to `f`.
void add_gpt_program_flags(CLI::App& cli, GptProgramFlags& f, const std::string& batch_help,
                           const std::string& seq_help);

/// The corpus `name` names: `synthetic` (200,000 characters generated from `seed`),
/// `shakespeare` (the installed corpus) or a text file. Throws with how to get it when it
/// is missing.
data::TextCorpus open_text_corpus(const std::string& name, std::uint64_t seed);
/// The corpus of f.data (open_text_corpus with f.seed).
data::TextCorpus open_gpt_corpus(const GptProgramFlags& f);

/// Where this rank of a GPT program runs: its device and its grid's backend.
struct GptPlace {
  Device device;        ///< --device: the CPU, or the GPU of this rank's local rank
  std::string backend;  ///< --backend with auto decided (dist::choose_backend): mpi or nccl
  /// Batch k of `loader`, its ids and targets copied to `device`.
  data::TextBatch batch(const data::TextLoader& loader, std::int64_t k) const;
};

/// f's device and backend for this rank; rank 0 prints the backend and why it was chosen
/// ("mgpu::dist: backend mpi (...)"). Collective over the world: every rank calls it once.
GptPlace place_gpt_ranks(const GptProgramFlags& f);

/// gpt-tiny for `corpus` (its vocabulary), the position table at least f.seq long, built
/// from f.seed in f's dtype on `device`: the model every rank cuts its part from.
std::unique_ptr<nn::GPT> make_full_gpt(const GptProgramFlags& f, const data::TextCorpus& corpus,
                                       const Device& device);

/// "DDP over each DP group: 2 bucket(s): 0.812 MiB 2.293 MiB" (`label`: "each DP group").
std::string ddp_buckets_line(const std::string& label, const std::vector<std::size_t>& bytes);

/// --check: one process training the unsplit model on the same batches with the same
/// AdamW, so every step's loss can be compared with the split model's.
class OneProcessCheck {
 public:
  /// `full` is the model the split one was cut from; it trains on from here (rank by rank,
  /// the same everywhere), on its own device (batches are copied there). Off (every call a
  /// no-op) unless `on`.
  OneProcessCheck(nn::GPT& full, const optim::AdamWOptions& options, bool on);
  /// One step on `batches` (the replicas' batches of this step; their gradients averaged):
  /// returns the mean of their losses and records |loss - it|.
  double step(const std::vector<data::TextBatch>& batches, double loss);
  /// The same on `count` batches of `loader` from `first` on (read only when it is on).
  double step(const data::TextLoader& loader, std::int64_t first, int count, double loss);
  /// Whether it trains at all.
  bool on() const { return on_; }
  /// The last step's loss of the unsplit model.
  double last() const { return last_; }
  /// " one process 2.123456 |diff| 1.2e-15" for a step line ("" when off).
  std::string step_text(double loss) const;
  /// "final: loss 2.123456 one process 2.123456 largest |diff| 1.2e-15".
  std::string final_line(double loss) const;

 private:
  nn::GPT* full_;
  std::unique_ptr<optim::AdamW> optimizer_;
  bool on_;
  double last_ = 0, worst_ = 0;
};

}  // namespace mgpu::app
