// train: lesson 12's program. Trains gpt-tiny (4 layers, 4 heads, C = 128, T = 128) on
// Shakespeare's characters with AdamW, reports the validation loss on the corpus's last 10%,
// and writes a few lines in the style it learnt. Your attention (tasks 1 and 2) and your
// recomputation (task 3) run in build/lessons/; the reference in build/solutions/.
//
//   build/solutions/12_transformer/train --sample 600                         (the chapter's run)
//   build/solutions/12_transformer/train --data synthetic --steps 200         (no download)
//   build/solutions/12_transformer/train --recompute full --steps 6 --batch-size 32
//                                                              (a step's memory and time)
//   ... --checkpoint-dir /tmp/gpt --save-every 100, later the same with --resume auto
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <memory>
#include <string>

#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/nn/recompute.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/threads.h"
#include "train_report.h"

namespace {

using namespace mgpu;
namespace l12 = mgpu::lesson12;

int train(const l12::GptFlags& f) {
  // Step 0) the device, the threads, and a CPU group for the checkpoints' collective save.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines in order with stderr's, also in a pipe
  if (f.threads > 0) set_num_threads(f.threads);
  const Device device = Device::parse(f.device);
  (void)Tensor::zeros({1}, DType::f32, device);  // an unusable --device fails here, first
  std::shared_ptr<dist::ProcessGroup> group = app::quiet_cpu_group();
  const double start_s = app::now_s();
  app::Trace trace;
  if (!f.trace.empty()) trace.open(f.trace, start_s);
  l12::GptMetrics metrics(f.metrics);

  // Step 1) the text: characters to ids, the first 90% to train on, the last 10% to
  // validate; batches are random windows of seq + 1 tokens (batch k depends on k alone).
  const data::TextCorpus corpus = app::open_text_corpus(f.data, f.seed);
  const data::TextLoader train_loader(corpus.train, f.batch, f.seq, f.seed, device);
  const data::TextLoader val_loader(corpus.validation, f.batch, f.seq, f.seed + 1, device);

  // Step 2) the model (your attention inside), AdamW, and what each block keeps.
  nn::manual_seed(f.seed);
  nn::GPT model(nn::GPTConfig::tiny(corpus.tokenizer.vocab_size()));
  model.to(device);
  const nn::RecomputePolicy policy = nn::parse_recompute(f.recompute);
  nn::set_recompute(model, policy);
  optim::AdamW optimizer(model.parameters(),
                         {f.lr, f.betas.first, f.betas.second, 1e-8, f.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  app::TracedModule traced_model(model, trace, device);
  app::TracedOptimizer traced_optimizer(optimizer, trace, device);
  const bool bf16 = f.precision == "bf16";
  l12::print_header(f, corpus, device, model, optimizer, policy);

  // Step 3) resume (lesson 07's checkpoints), and --export's initial weights.
  l12::LossWindow window;
  const std::int64_t first_step = l12::resume_run(*group, f, model, optimizer, device, window);
  l12::Export exported(f, model);

  app::ProgressLine progress;
  progress.start_epoch(0, 1, f.steps);
  double peak_step_bytes = 0, val_loss = 0;
  l12::StepClock clock;
  for (std::int64_t step = first_step; step < f.steps; ++step) {
    const double t0 = app::now_s();
    const std::clock_t c0 = std::clock();
    const double lr = l12::learning_rate(f, step);
    optimizer.set_lr(lr);
    // Step 4) the batch: inputs and the same tokens shifted by one.
    const data::TextBatch b = train_loader.batch(step);
    reset_peak_memory(device);
    const double step_base = static_cast<double>(memory_stats(device).allocated);
    // Step 5) forward (in bf16 GEMMs for --precision bf16), the loss over every position,
    // backward, AdamW.
    optimizer.zero_grad();
    const Tensor logits = l12::forward(traced_model, b.inputs, bf16);
    const std::int64_t rows = b.inputs.numel(), vocab = logits.size(2);
    const double loss =
        loss_fn.forward(logits.reshape({rows, vocab}), b.targets.reshape({rows})).item();
    traced_model.backward(loss_fn.backward().reshape(logits.shape()));
    traced_optimizer.step();
    synchronize(device);
    if (step > first_step)  // the first step allocates AdamW's state
      peak_step_bytes = std::max(
          peak_step_bytes, static_cast<double>(memory_stats(device).peak_allocated) - step_base);
    clock.wall_s += app::now_s() - t0;
    clock.cpu_s += static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    ++clock.steps;
    exported.record(step, b, lr, loss);
    window.sum += loss;
    ++window.count;
    progress.update(step + 1, window.sum / static_cast<double>(window.count), clock.seq_per_s(f.batch),
                    static_cast<double>(f.steps - step - 1) * clock.wall_s / static_cast<double>(clock.steps));
    // Step 6) every --eval-every steps and at the end: the validation loss.
    const bool last = step + 1 == f.steps;
    if (last || (f.eval_every > 0 && (step + 1) % f.eval_every == 0)) {
      progress.clear();
      val_loss = l12::report_evaluation(model, val_loader, f, bf16, step, lr, clock, window, metrics,
                                        trace, start_s);
    }
    // Step 7) a checkpoint every --save-every steps, and at the end.
    if (!f.ck.dir.empty() && (last || (f.ck.save_every > 0 && (step + 1) % f.ck.save_every == 0)))
      dist::log0("checkpoint: ", l12::save_run(*group, f, model, optimizer, step + 1, window),
                 " (step ", step + 1, ")");
  }
  progress.clear();
  if (clock.steps == 0) val_loss = l12::validation_loss(model, val_loader, f.eval_batches, bf16);
  exported.write();

  // Step 8) what a step held beyond the weights, gradients and AdamW's state, and a sample.
  l12::print_step_memory(peak_step_bytes, static_cast<double>(memory_stats(device).allocated),
                         clock.steps, policy);
  if (f.sample > 0) {
    const double s0 = app::now_s();
    const std::string text = l12::sample_text(model, corpus.tokenizer, f.sample, f.temperature,
                                              f.seed, device, bf16);
    trace.span("compute", "sample", s0, app::now_s());
    std::printf("sample (%lld characters, temperature %g, seed %llu):\n%s\n",
                static_cast<long long>(f.sample), f.temperature,
                static_cast<unsigned long long>(f.seed), text.c_str());
  }
  app::log_weights_fingerprint(model);  // a resumed run ends with the same bits
  trace.write();
  std::printf("final: val_loss=%.4f train_loss=%.4f tokens_per_s=%.0f time_s=%.1f\n", val_loss,
              window.last_mean, clock.seq_per_s(f.batch) * static_cast<double>(f.seq), app::now_s() - start_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  l12::GptFlags f;
  CLI::App cli{"Lesson 12: train gpt-tiny on Shakespeare's characters (AdamW, validation on "
               "the last 10%), then generate text with --sample N."};
  l12::add_gpt_flags(cli, f);
  MGPU_PARSE_FLAGS(cli, argc, argv);
  if (!app::checkpoint_flags_ok(f.ck)) return 1;
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
