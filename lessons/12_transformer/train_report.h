/// @file train_report.h
/// @brief What lesson 12's program sets up and reports around its training loop: its flags,
/// the learning-rate schedule, the validation loss, the generated text, the metrics lines,
/// the checkpoints and the --export file of bench/gpt_torch.py. Program-only: the tests do
/// not use it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/app/gpt_program.h"
#include "mgpu/data/text.h"
#include "mgpu/dist/dist.h"
#include "mgpu/io/atomic_file.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/io/checksum.h"
#include "mgpu/io/optimizer_state_check.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/nn/autocast.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/loss.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/threads.h"

namespace mgpu::lesson12 {

/// The program's flags (its own set: a language model has no test accuracy or epochs).
struct GptFlags {
  std::string data = "shakespeare";  ///< shakespeare | synthetic | a text file
  std::int64_t steps = 600;          ///< optimizer steps
  std::int64_t batch = 8;            ///< sequences per step
  std::int64_t seq = 128;            ///< tokens per sequence (<= block_size)
  double lr = 4e-3;                  ///< peak learning rate
  double min_lr_share = 0.25;        ///< the cosine ends at lr x this
  std::int64_t warmup = 30;          ///< linear warm-up steps
  double weight_decay = 0.0;         ///< AdamW's decoupled decay
  std::pair<double, double> betas{0.9, 0.99};  ///< AdamW's (beta1, beta2)
  std::int64_t eval_every = 100;     ///< steps between validation losses (0: at the end only)
  std::int64_t eval_batches = 40;    ///< validation batches per evaluation
  std::int64_t sample = 0;           ///< characters to generate at the end
  double temperature = 0.8;          ///< sampling temperature (0: the likeliest character)
  std::uint64_t seed = 0;            ///< initial weights, batches, sampling
  std::string recompute = "none";    ///< none | full | attn
  std::string precision = "fp32";    ///< fp32 | bf16 (the GEMMs' dtype)
  int threads = 0;                   ///< CPU threads (0: the library's default)
  std::string device = "cpu";        ///< cpu | cuda | cuda:N
  std::string metrics, trace;        ///< --metrics, --trace
  std::string export_path;           ///< --export: initial weights, batches, losses
  std::int64_t export_steps = 20;    ///< steps --export records
  app::CheckpointFlags ck;           ///< --checkpoint-dir, --save-every, --resume, ...
};

/// Declares every flag on `cli`; numbers and names are checked as they are parsed.
inline void add_gpt_flags(CLI::App& cli, GptFlags& f) {
  cli.add_option("--data", f.data, "shakespeare (installed by tools/install-deps), synthetic "
                 "(generated text, no download), or the path of a text file")
      ->capture_default_str();
  cli.add_option("--steps", f.steps, "optimizer steps")
      ->check(app::positive_integer(100000000))->capture_default_str();
  cli.add_option("--batch-size", f.batch, "sequences per step")
      ->check(app::positive_integer(1 << 20))->capture_default_str();
  cli.add_option("--seq", f.seq, "tokens per sequence, T (at most the model's block_size, 128)")
      ->check(app::positive_integer(128))->capture_default_str();
  cli.add_option("--lr", f.lr, "peak learning rate (after --warmup steps; a cosine then "
                 "brings it down to lr x --min-lr-share at the last step)")
      ->check(app::real_in(1e-9, 10.0))->capture_default_str();
  cli.add_option("--min-lr-share", f.min_lr_share, "the last step's learning rate as a share of --lr")
      ->check(app::real_in(0.0, 1.0))->capture_default_str();
  cli.add_option("--warmup", f.warmup, "steps of linear warm-up from 0 to --lr")
      ->check(app::non_negative_integer(100000000))->capture_default_str();
  cli.add_option("--weight-decay", f.weight_decay, "AdamW's decoupled weight decay")
      ->check(app::real_in(0.0, 1.0))->capture_default_str();
  cli.add_option("--betas", f.betas, "AdamW's beta1 beta2")
      ->check(app::real_below(0.0, 1.0))->capture_default_str();
  cli.add_option("--eval-every", f.eval_every, "steps between validation losses (0: at the end only)")
      ->check(app::non_negative_integer(100000000))->capture_default_str();
  cli.add_option("--eval-batches", f.eval_batches, "validation batches per evaluation (the "
                 "same batches every time)")
      ->check(app::positive_integer(100000))->capture_default_str();
  cli.add_option("--sample", f.sample, "characters to generate after training")
      ->check(app::non_negative_integer(1000000))->capture_default_str();
  cli.add_option("--temperature", f.temperature, "sampling temperature: logits / T before "
                 "the softmax (0: always the likeliest character)")
      ->check(app::real_in(0.0, 100.0))->capture_default_str();
  cli.add_option("--seed", f.seed, "initial weights, training batches and sampling")
      ->capture_default_str();
  cli.add_option("--recompute", f.recompute, "what each block keeps for backward: none "
                 "(everything), full (its input; the rest is recomputed), attn (all but "
                 "attention's probabilities)")
      ->check(CLI::IsMember({"none", "full", "attn"}))->capture_default_str();
  cli.add_option("--precision", f.precision, "fp32, or bf16 (the GEMMs in bf16 under "
                 "lesson 08's autocast, fp32 master weights)")
      ->check(CLI::IsMember({"fp32", "bf16"}))->capture_default_str();
  cli.add_option("--threads", f.threads, "CPU threads (0: OMP_NUM_THREADS, else the cores)")
      ->check(app::non_negative_integer(1024))->capture_default_str();
  cli.add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
  cli.add_option("--metrics", f.metrics, "JSON lines, one per evaluation");
  cli.add_option("--trace", f.trace, "a Chrome trace of the run (forward, backward, optimizer, "
                 "evaluate, sample)");
  cli.add_option("--export", f.export_path, "writes the initial weights and the first "
                 "--export-steps steps' batches, learning rates and losses as safetensors "
                 "(bench/gpt_torch.py replays them in PyTorch)");
  cli.add_option("--export-steps", f.export_steps, "steps --export records")
      ->check(app::positive_integer(1000))->capture_default_str();
  app::add_checkpoint_flags(cli, f.ck);
}

/// The learning rate of step `step` (0-based): a linear warm-up to f.lr over f.warmup steps,
/// then a half cosine down to f.lr x f.min_lr_share at the last step.
inline double learning_rate(const GptFlags& f, std::int64_t step) {
  if (step < f.warmup) return f.lr * static_cast<double>(step + 1) / static_cast<double>(f.warmup);
  const std::int64_t span = std::max<std::int64_t>(1, f.steps - f.warmup - 1);
  const double progress = std::min(1.0, static_cast<double>(step - f.warmup) / static_cast<double>(span));
  const double low = f.lr * f.min_lr_share;
  return low + 0.5 * (f.lr - low) * (1.0 + std::cos(M_PI * progress));
}

/// The forward under --precision: inside a bf16 autocast region for bf16.
inline Tensor forward(nn::Module& model, const Tensor& ids, bool bf16) {
  if (!bf16) return model.forward(ids);
  amp::Autocast region(DType::bf16);
  return model.forward(ids);
}

/// The mean loss over batches 0 .. batches-1 of `loader` (the same ones every time), in
/// evaluation mode (nothing kept for backward).
inline double validation_loss(nn::GPT& model, const data::TextLoader& loader,
                              std::int64_t batches, bool bf16) {
  model.eval();
  nn::CrossEntropyLoss loss_fn;
  double sum = 0;
  for (std::int64_t k = 0; k < batches; ++k) {
    const data::TextBatch b = loader.batch(k);
    const Tensor logits = forward(model, b.inputs, bf16);
    const std::int64_t rows = b.inputs.numel();
    sum += loss_fn.forward(logits.reshape({rows, logits.size(2)}), b.targets.reshape({rows})).item();
  }
  model.train();
  return sum / static_cast<double>(batches);
}

/// `count` characters generated after a newline, one at a time: the model sees the last
/// block_size characters, the next one is drawn from softmax(logits / temperature) (the
/// likeliest one at temperature 0) with a generator seeded by `seed`.
inline std::string sample_text(nn::GPT& model, const data::CharTokenizer& tokenizer,
                               std::int64_t count, double temperature, std::uint64_t seed,
                               const Device& device, bool bf16) {
  model.eval();
  const std::int64_t block = model.config().block_size, vocab = model.config().vocab_size;
  const std::string start = tokenizer.chars().find('\n') != std::string::npos
                                ? std::string("\n") : tokenizer.chars().substr(0, 1);
  std::vector<std::int32_t> ids = tokenizer.encode(start), out;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> p(static_cast<std::size_t>(vocab));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::size_t n = std::min<std::size_t>(ids.size(), static_cast<std::size_t>(block));
    std::vector<std::int64_t> context(ids.end() - static_cast<std::ptrdiff_t>(n), ids.end());
    const Tensor x = Tensor::from_vector(context, {1, static_cast<std::int64_t>(n)}, device);
    const std::vector<float> logits = forward(model, x, bf16).to(Device::cpu()).to_vector<float>();
    const float* last = logits.data() + (n - 1) * static_cast<std::size_t>(vocab);
    std::int32_t next = 0;
    if (temperature == 0.0) {
      next = static_cast<std::int32_t>(std::max_element(last, last + vocab) - last);
    } else {
      const double top = *std::max_element(last, last + vocab);
      double total = 0;
      for (std::int64_t v = 0; v < vocab; ++v) total += p[v] = std::exp((last[v] - top) / temperature);
      double r = uniform(rng) * total;
      for (next = 0; next + 1 < vocab && (r -= p[next]) > 0; ++next) {}
    }
    ids.push_back(next);
    out.push_back(next);
  }
  model.train();
  return tokenizer.decode(out);
}

/// --metrics: one JSON object per evaluation, the whole file replaced atomically each time.
class GptMetrics {
 public:
  /// Checks now that `path` can be written ("" switches the file off).
  explicit GptMetrics(const std::string& path) : path_(path) {
    if (!path_.empty()) io::probe_writable(path_);
  }
  /// Adds one line of (name, value) fields.
  void write(const std::vector<std::pair<std::string, double>>& fields) {
    if (path_.empty()) return;
    std::ostringstream line;
    line.precision(10);
    line << "{";
    for (std::size_t i = 0; i < fields.size(); ++i)
      line << (i ? ", " : "") << "\"" << fields[i].first << "\": " << fields[i].second;
    line << "}\n";
    text_ += line.str();
    const std::size_t slash = path_.find_last_of('/');
    io::atomic_replace(slash == std::string::npos ? "." : path_.substr(0, slash),
                       slash == std::string::npos ? path_ : path_.substr(slash + 1), text_);
  }

 private:
  std::string path_, text_;
};

/// The training loss between evaluations: its sum and count (saved in checkpoints, so a
/// resumed run reports the same numbers).
struct LossWindow {
  double sum = 0;          ///< sum of the steps' losses since the last evaluation
  std::int64_t count = 0;  ///< steps since the last evaluation
  double last_mean = 0;    ///< the mean of the previous window
  /// Ends the window: its mean (the previous one's when it is empty).
  double close() {
    if (count > 0) last_mean = sum / static_cast<double>(count);
    sum = 0;
    count = 0;
    return last_mean;
  }
};

/// The run's first lines: the corpus and device, the data, the model, the batch and the
/// learning-rate schedule.
inline void print_header(const GptFlags& f, const data::TextCorpus& corpus, const Device& device,
                         nn::GPT& model, const optim::AdamW& optimizer, nn::RecomputePolicy policy) {
  std::printf("lesson 12: gpt-tiny on %s, %s, %d thread(s)\n", corpus.source.c_str(),
              device.str().c_str(), num_threads());
  std::printf("data: %zu training and %zu validation tokens, %lld characters in the vocabulary\n",
              corpus.train.size(), corpus.validation.size(),
              static_cast<long long>(corpus.tokenizer.vocab_size()));
  std::printf("model: gpt-tiny (%s), %lld parameters; %s; recompute %s; GEMMs in %s\n",
              model.config().str().c_str(), static_cast<long long>(model.num_parameters()),
              optimizer.describe().c_str(), nn::recompute_name(policy), f.precision.c_str());
  std::printf("batch: %lld sequences of %lld tokens (%lld tokens per step); %lld steps, lr %g "
              "after %lld warm-up steps, cosine to %g\n",
              static_cast<long long>(f.batch), static_cast<long long>(f.seq),
              static_cast<long long>(f.batch * f.seq), static_cast<long long>(f.steps), f.lr,
              static_cast<long long>(f.warmup), f.lr * f.min_lr_share);
}

/// The training steps' time so far: how many, their wall seconds and the CPU seconds of
/// every thread of the process (on a shared machine the wall time of a step depends on what
/// else runs; its CPU time much less).
struct StepClock {
  std::int64_t steps = 0;
  double wall_s = 0, cpu_s = 0;
  /// Training sequences per wall second.
  double seq_per_s(std::int64_t batch) const {
    return wall_s > 0 ? static_cast<double>(steps * batch) / wall_s : 0.0;
  }
};

/// Step 6: the validation loss, then one line and one --metrics record: the training loss
/// over the window (closed here), tokens/s, a step's mean wall and CPU time. Returns the
/// validation loss.
inline double report_evaluation(nn::GPT& model, const data::TextLoader& val_loader,
                                const GptFlags& f, bool bf16, std::int64_t step, double lr,
                                const StepClock& clock, LossWindow& window, GptMetrics& metrics,
                                app::Trace& trace, double start_s) {
  const double e0 = app::now_s();
  const double val_loss = validation_loss(model, val_loader, f.eval_batches, bf16);
  trace.span("compute", "evaluate", e0, app::now_s());
  const double train_loss = window.close();
  const double tokens_per_s = clock.seq_per_s(f.batch) * static_cast<double>(f.seq);
  const double steps = static_cast<double>(clock.steps);
  const double step_ms = 1e3 * clock.wall_s / steps, step_cpu_ms = 1e3 * clock.cpu_s / steps;
  std::printf("step %lld/%lld: lr=%.3g train_loss=%.4f val_loss=%.4f tokens_per_s=%.0f "
              "step_ms=%.1f step_cpu_ms=%.1f time_s=%.1f\n",
              static_cast<long long>(step + 1), static_cast<long long>(f.steps), lr, train_loss,
              val_loss, tokens_per_s, step_ms, step_cpu_ms, app::now_s() - start_s);
  std::fflush(stdout);
  metrics.write({{"step", static_cast<double>(step + 1)}, {"lr", lr}, {"train_loss", train_loss},
                 {"val_loss", val_loss}, {"tokens_per_s", tokens_per_s}, {"step_ms", step_ms},
                 {"step_cpu_ms", step_cpu_ms}, {"time_s", app::now_s() - start_s}});
  return val_loss;
}

/// Step 8: what a step held beyond the weights, gradients and AdamW's state (measured from
/// the second step on: the first allocates AdamW's state).
inline void print_step_memory(double peak_step_bytes, double held_bytes, std::int64_t trained_steps,
                              nn::RecomputePolicy policy) {
  if (trained_steps >= 2)
    std::printf("memory: a step peaks %s above the %s held between steps (recompute %s; "
                "weights, gradients, AdamW's state)\n", app::mib(peak_step_bytes).c_str(),
                app::mib(held_bytes).c_str(), nn::recompute_name(policy));
  else
    std::printf("memory: a step's peak is measured from the second step on (%lld step(s) run)\n",
                static_cast<long long>(trained_steps));
}

/// What a checkpoint must agree on with the run that resumes it: every value that decides
/// the batches and the learning rate of each step (the model's sizes follow from --data).
inline std::map<std::string, std::string> run_identity(const GptFlags& f) {
  std::ostringstream lr;
  lr.precision(17);
  lr << f.lr << " " << f.min_lr_share << " " << f.warmup;
  return {{"data", f.data}, {"steps", std::to_string(f.steps)},
          {"batch_size", std::to_string(f.batch)}, {"seq", std::to_string(f.seq)},
          {"lr_schedule", lr.str()}, {"precision", f.precision}};
}

/// The flag each run_identity() key comes from.
inline std::string identity_flag(const std::string& key) {
  if (key == "batch_size") return "--batch-size";
  if (key == "lr_schedule") return "--lr, --min-lr-share and --warmup";
  return "--" + key;
}

/// Saves the run at `step` steps done into --checkpoint-dir (lesson 07's checkpoints, the
/// library's reference): model, AdamW's state, the step, the loss window. Returns the path.
inline std::string save_run(dist::ProcessGroup& group, const GptFlags& f, nn::GPT& model,
                            const optim::AdamW& optimizer, std::int64_t step,
                            const LossWindow& window) {
  io::TrainingProgress p;
  p.step_in_epoch = p.global_step = step;
  p.samples_in_epoch = step * f.batch;
  p.batch_size = f.batch;
  p.data_seed = f.seed;
  p.lr = optimizer.lr();
  io::TrainingState state = io::capture_training_state(model, optimizer, p);
  state.extra["loss_window"] = io::scalars_to_state(
      {{"sum", window.sum}, {"count", static_cast<double>(window.count)}, {"last_mean", window.last_mean}});
  for (const auto& [key, value] : run_identity(f)) state.metadata["run." + key] = value;
  return io::save_checkpoint(group, f.ck.dir, state, f.ck.keep_last);
}

/// --resume: loads the checkpoint into the model and the optimizer, refuses one of another
/// run (run_identity(), --seed), and returns the steps it had done (0: nothing to resume).
inline std::int64_t resume_run(dist::ProcessGroup& group, const GptFlags& f, nn::GPT& model,
                               optim::AdamW& optimizer, const Device& device, LossWindow& window) {
  if (f.ck.resume.empty()) return 0;
  const std::string where = f.ck.resume == "auto" ? f.ck.dir : f.ck.resume;
  io::TrainingState state;
  std::string path;
  if (!io::load_checkpoint(group, where, device, state, &path, nullptr, f.ck.allow_non_finite)) {
    dist::log0("nothing to resume in ", where, ": starting at step 0");
    return 0;
  }
  for (const auto& [key, value] : run_identity(f)) {
    const auto it = state.metadata.find("run." + key);
    MGPU_CHECK(it != state.metadata.end() && it->second == value, path, ": saved by a run with ",
               key, " = '", it == state.metadata.end() ? std::string("?") : it->second,
               "', this one has '", value, "' (", identity_flag(key), ")");
  }
  MGPU_CHECK(state.progress.data_seed == f.seed, path, ": saved by a run with --seed ",
             state.progress.data_seed, ", this one has --seed ", f.seed);
  // What the checksums cannot see: AdamW step counts outside 1..the saved step, negative
  // second moments (each trains on to -nan).
  io::check_optimizer_state(state.optimizer, state.progress.global_step, "optim.", path);
  const io::TrainingProgress p = io::restore_training_state(state, model, optimizer, path);
  MGPU_CHECK(p.global_step >= 0 && p.global_step <= f.steps, path, ": step ", p.global_step,
             " is outside this run's ", f.steps, " steps (--steps)");
  MGPU_CHECK(state.extra.count("loss_window") != 0, path, ": no loss_window state");
  const auto w = io::state_to_scalars(state.extra.at("loss_window"), path);
  MGPU_CHECK(w.count("sum") && w.count("count") && w.count("last_mean"), path,
             ": loss_window lacks sum, count or last_mean");
  window.sum = w.at("sum");
  window.count = static_cast<std::int64_t>(w.at("count"));
  window.last_mean = w.at("last_mean");
  const std::string note = io::checksum_note(state.metadata);  // no checksums, or the old basis
  dist::log0("resumed from ", path, " at step ", p.global_step, " of ", f.steps, note.empty() ? "" : "\n  " + note);
  return p.global_step;
}

/// --export: the initial weights ("model.<name>"), each recorded step's batch
/// ("batch.<k>.inputs", "batch.<k>.targets"), learning rate and loss ("lr", "loss": f64
/// [steps]), and the model's sizes and AdamW's settings in the metadata.
class Export {
 public:
  /// Copies the initial weights now when `f.export_path` is set.
  Export(const GptFlags& f, nn::GPT& model) : f_(f) {
    if (f.export_path.empty()) return;
    io::probe_writable(f.export_path);
    for (const auto& [name, t] : io::module_state_dict(model))
      tensors_["model." + name] = t.to(Device::cpu()).clone();
    const nn::GPTConfig& c = model.config();
    std::ostringstream adam;
    adam.precision(17);
    adam << f.betas.first << " " << f.betas.second << " 1e-08 " << f.weight_decay;
    metadata_ = {{"n_layer", std::to_string(c.n_layer)}, {"n_head", std::to_string(c.n_head)},
                 {"n_embd", std::to_string(c.n_embd)}, {"block_size", std::to_string(c.block_size)},
                 {"vocab_size", std::to_string(c.vocab_size)},
                 {"adamw", adam.str()}, {"data", f.data}};
  }
  /// After step `step` (0-based): its batch, learning rate and loss, while step < --export-steps.
  void record(std::int64_t step, const data::TextBatch& b, double lr, double loss) {
    if (f_.export_path.empty() || step >= f_.export_steps) return;
    const std::string k = "batch." + std::to_string(step) + ".";
    tensors_[k + "inputs"] = b.inputs.to(Device::cpu()).clone();
    tensors_[k + "targets"] = b.targets.to(Device::cpu()).clone();
    lrs_.push_back(lr);
    losses_.push_back(loss);
  }
  /// Writes the file (after training).
  void write() {
    if (f_.export_path.empty()) return;
    const std::int64_t n = static_cast<std::int64_t>(losses_.size());
    tensors_["lr"] = Tensor::from_vector(lrs_, {n});
    tensors_["loss"] = Tensor::from_vector(losses_, {n});
    io::save_safetensors(f_.export_path, tensors_, metadata_);
    dist::log0("export: ", f_.export_path, " (initial weights, ", n, " steps' batches and losses)");
  }

 private:
  const GptFlags& f_;
  io::TensorDict tensors_;
  io::Metadata metadata_;
  std::vector<double> lrs_, losses_;
};

}  // namespace mgpu::lesson12
