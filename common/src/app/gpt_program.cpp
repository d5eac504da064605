// The GPT programs' shared flags, corpus, unsplit model and --check (see gpt_program.h).
#include "mgpu/app/gpt_program.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mgpu/app/flags.h"
#include "mgpu/dist/log.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/dist/runtime.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"

namespace mgpu::app {

void add_gpt_program_flags(CLI::App& cli, GptProgramFlags& f, const std::string& batch_help,
                           const std::string& seq_help) {
  cli.add_option("--data", f.data, "synthetic, shakespeare or a text file")->capture_default_str();
  // The validators of lesson 01's flags (flags.h): one line naming the flag and the value.
  cli.add_option("--steps", f.steps, "optimizer steps")->check(positive_integer(std::int64_t{1} << 40))->capture_default_str();
  cli.add_option("--batch-size", f.batch, batch_help)->check(positive_integer(kMaxGptBatch))->capture_default_str();
  cli.add_option("--seq", f.seq, seq_help)->check(positive_integer(kMaxGptSeq))->capture_default_str();
  cli.add_option("--lr", f.lr, "AdamW's learning rate")->check(non_negative_real())->capture_default_str();
  cli.add_option("--seed", f.seed, "weights and batches")
      ->check(non_negative_integer(9007199254740991))->capture_default_str();
  cli.add_flag("--check,!--no-check", f.check, "also train the unsplit model and print its loss");
  cli.add_option("--dtype", f.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  cli.add_option("--device", f.device, "cpu, or cuda (rank r uses cuda:<local rank>)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cli.add_option("--backend", f.backend, "the grid's groups: auto (nccl where every rank has a GPU "
                 "of its own, else mpi), mpi or nccl")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}))->capture_default_str();
}

GptPlace place_gpt_ranks(const GptProgramFlags& f) {
  GptPlace place;
  place.device = dist::rank_device(f.device);
  const dist::BackendChoice choice = dist::choose_backend(f.backend, place.device);
  place.backend = choice.backend;
  dist::log0("mgpu::dist: backend ", choice.backend, " (", choice.reason, "); ", dist::world_size(),
             " rank(s) on ", place.device.is_cuda() ? "the GPU of each local rank" : "the CPU");
  return place;
}

data::TextBatch GptPlace::batch(const data::TextLoader& loader, std::int64_t k) const {
  data::TextBatch b = loader.batch(k);
  b.inputs = b.inputs.to(device);
  b.targets = b.targets.to(device);
  return b;
}

data::TextCorpus open_text_corpus(const std::string& name, std::uint64_t seed) {
  if (name == "synthetic") return data::TextCorpus::synthetic(200000, seed);
  if (name == "shakespeare") return data::TextCorpus::load(data::TextCorpus::kDefaultPath);
  return data::TextCorpus::load(name);
}

data::TextCorpus open_gpt_corpus(const GptProgramFlags& f) { return open_text_corpus(f.data, f.seed); }

std::unique_ptr<nn::GPT> make_full_gpt(const GptProgramFlags& f, const data::TextCorpus& corpus,
                                       const Device& device) {
  nn::GPTConfig config = nn::GPTConfig::tiny(corpus.tokenizer.vocab_size());
  config.block_size = std::max(config.block_size, f.seq);  // a long context: a longer position table
  nn::manual_seed(f.seed);
  auto full = std::make_unique<nn::GPT>(config);
  full->to(f.value_dtype());
  full->to(device);
  return full;
}

OneProcessCheck::OneProcessCheck(nn::GPT& full, const optim::AdamWOptions& options, bool on)
    : full_(&full), on_(on) {
  if (on_) optimizer_ = std::make_unique<optim::AdamW>(full.parameters(), options);
}

double OneProcessCheck::step(const std::vector<data::TextBatch>& batches, double loss) {
  if (!on_) return 0.0;
  // The unsplit model on all the replicas' batches, their gradients averaged.
  full_->zero_grad();
  const double n = static_cast<double>(batches.size());
  double ref = 0.0;
  const Device device = full_->parameters().front()->value.device();
  for (const data::TextBatch& b : batches)
    ref += nn::gpt_loss_step(*full_, b.inputs.to(device), b.targets.to(device)) / n;
  if (batches.size() > 1)
    for (nn::Parameter* p : full_->parameters()) scale_(p->grad, 1.0 / n);
  optimizer_->step();
  last_ = ref;
  worst_ = std::max(worst_, std::abs(loss - ref));
  return ref;
}

double OneProcessCheck::step(const data::TextLoader& loader, std::int64_t first, int count, double loss) {
  std::vector<data::TextBatch> batches;
  for (int i = 0; i < count && on_; ++i) batches.push_back(loader.batch(first + i));
  return step(batches, loss);
}

std::string ddp_buckets_line(const std::string& label, const std::vector<std::size_t>& bytes) {
  std::string line = "DDP over " + label + ": " + std::to_string(bytes.size()) + " bucket(s):";
  char size[32];
  for (std::size_t b : bytes) {
    std::snprintf(size, sizeof size, " %.3f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
    line += size;
  }
  return line;
}

std::string OneProcessCheck::step_text(double loss) const {
  if (!on_) return "";
  char text[96];
  std::snprintf(text, sizeof text, " one process %.6f |diff| %.2e", last_, std::abs(loss - last_));
  return text;
}

std::string OneProcessCheck::final_line(double loss) const {
  char text[128];
  if (on_)
    std::snprintf(text, sizeof text, "final: loss %.6f one process %.6f largest |diff| %.2e", loss,
                  last_, worst_);
  else
    std::snprintf(text, sizeof text, "final: loss %.6f", loss);
  return text;
}

}  // namespace mgpu::app
