/// @file train_report.h
/// @brief What lesson 08's program sets up and reports around its training loop: its own
/// flags, the set-up line, the loss scale per epoch and in --scale-log, the scaler in the
/// checkpoints. Program-only: the tests do not use it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>

#include "mgpu/amp/train_step.h"
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/models.h"

namespace mgpu::lesson08 {

/// The program's own flags, beside the shared ones.
struct AmpFlags {
  std::string precision = "fp16";
  bool no_loss_scaling = false;
  double init_scale = 65536.0;
  std::int64_t growth_interval = 2000;
  std::string scale_log;
  app::CheckpointFlags ck;  // --checkpoint-dir, --save-every, --keep-last, --resume
};

/// Adds the mixed-precision and checkpoint flags to `cli`.
inline void add_amp_flags(CLI::App& cli, AmpFlags& f) {
  cli.add_option("--precision", f.precision, "fp32, bf16 or fp16 (the GEMMs' dtype)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  cli.add_flag("--no-loss-scaling", f.no_loss_scaling,
               "fp16 without GradScaler (to see what underflow costs without it)");
  CLI::Option* init_scale =
      cli.add_option("--init-scale", f.init_scale, "GradScaler's first scale (fp16 only)")
          ->check(app::real_in(1e-30, 3.4e38))->capture_default_str();
  CLI::Option* growth =
      cli.add_option("--growth-interval", f.growth_interval,
                     "clean steps in a row before the scale doubles (fp16 only)")
          ->check(app::positive_integer())->capture_default_str();
  // The scaler's flags where no scaler runs would be ignored: refused instead. bf16 keeps
  // fp32's exponent range, so its gradients do not underflow and PyTorch's AMP recipe uses
  // no GradScaler with it.
  cli.final_callback([&f, init_scale, growth] {
    for (const CLI::Option* o : {init_scale, growth}) {
      if (o->count() == 0) continue;
      std::string why;
      if (f.precision == "bf16")
        why = "loss scaling is off with --precision bf16: bf16 has fp32's exponent range, so "
              "gradients do not underflow and need no loss scaling (as in PyTorch, where "
              "GradScaler is for float16)";
      else if (f.precision == "fp32")
        why = "loss scaling is off with --precision fp32 (it is for fp16's narrow range)";
      else if (f.no_loss_scaling)
        why = "--no-loss-scaling turns the scaler off";
      if (!why.empty())
        throw CLI::ValidationError(
            o->get_name(), why + "; drop " + o->get_name() +
                               (f.no_loss_scaling && f.precision == "fp16"
                                    ? " or --no-loss-scaling"
                                    : " or use --precision fp16"));
    }
  });
  cli.add_option("--scale-log", f.scale_log,
                 "JSON lines of the loss scale's changes and skipped steps (plot_scale.py)");
  app::add_checkpoint_flags(cli, f.ck);
}

/// The scaler's options from the flags: on for fp16 unless --no-loss-scaling.
inline amp::GradScalerOptions scaler_options(const AmpFlags& f, amp::Precision precision) {
  amp::GradScalerOptions so;
  so.enabled = precision == amp::Precision::fp16 && !f.no_loss_scaling;
  so.init_scale = f.init_scale;
  so.growth_interval = f.growth_interval;
  return so;
}

/// Rank 0's set-up line: the model, the GEMMs' dtype, the loss scaling.
inline void print_setup(const app::Options& opt, nn::Module& model, amp::Precision precision,
                        const amp::GradScalerOptions& so, int world) {
  std::ostringstream scaling;
  scaling << std::setprecision(10) << "loss scaling " << (so.enabled ? "on" : "off");
  if (so.enabled)
    scaling << " (init_scale " << so.init_scale << ", growth_interval " << so.growth_interval
            << (world > 1 ? ", every rank skips together)" : ")");
  dist::log0(app::model_line(opt.model, model.num_parameters(), "fp32 parameters"), "; GEMMs in ",
             amp::precision_name(precision),
             "; ", scaling.str());
}

/// How the checkpoints of lesson 07 (the library's reference) carry this run: model,
/// optimizer, random streams and the scaler's five numbers, so that a resumed run
/// continues the same scale sequence and skips the same steps.
inline app::CheckpointHooks checkpoint_hooks(nn::Module& model, optim::Optimizer& optimizer,
                                             amp::GradScaler& scaler) {
  app::CheckpointHooks hooks;
  hooks.capture = [&](const io::TrainingProgress& p) {
    io::TrainingState state = io::capture_training_state(model, optimizer, p);
    if (scaler.is_enabled()) state.extra["scaler"] = io::scalars_to_state(scaler.state_dict());
    return state;
  };
  hooks.restore = [&](const io::TrainingState& st, const std::string& path) {
    const io::TrainingProgress p = io::restore_training_state(st, model, optimizer, path);
    if (scaler.is_enabled()) {
      MGPU_CHECK(st.extra.count("scaler") != 0, path, " holds no GradScaler state (saved with "
                 "--no-loss-scaling); resume with --no-loss-scaling too");
      scaler.load_state_dict(io::state_to_scalars(st.extra.at("scaler"), path));
    }
    return p;
  };
  hooks.resumed_note = [&] {
    std::ostringstream note;
    if (scaler.is_enabled())
      note << std::setprecision(10) << "; loss scale " << scaler.get_scale()
           << ", growth tracker " << scaler.growth_tracker();
    return note.str();
  };
  return hooks;
}

/// --scale-log: one JSON line per step at which the scale changed or the step was skipped,
/// and for the first and the last step (plot_scale.py draws them).
class ScaleLog {
 public:
  explicit ScaleLog(const std::string& path) {
    if (path.empty() || dist::rank() != 0) return;
    out_.open(path);
    MGPU_CHECK(out_.good(), "--scale-log: cannot write ", path);
    out_ << std::setprecision(17);  // a scale is a float: exact in 17 digits
  }
  void record(std::int64_t step, int epoch, double scale, bool skipped, bool last = false) {
    const bool changed = step == 1 || scale != previous_;
    previous_ = scale;
    if (!out_.is_open() || !(changed || skipped || last)) return;
    out_ << "{\"step\": " << step << ", \"epoch\": " << epoch << ", \"scale\": " << scale
         << ", \"skipped\": " << (skipped ? "true" : "false") << "}\n";
  }

 private:
  std::ofstream out_;
  double previous_ = 0;
};

/// The loss scale over one epoch: its lowest value and the steps the scaler skipped, for
/// the metrics line (loss_scale, loss_scale_min, skipped_steps) and a note when any was.
class EpochScale {
 public:
  explicit EpochScale(const amp::GradScaler& scaler) : lowest_(scaler.get_scale()) {}
  /// After each step.
  void step(const amp::StepResult& r) {
    skipped_ += r.stepped ? 0 : 1;
    lowest_ = std::min(lowest_, r.scale);
  }
  /// At the epoch's end, before run.end_epoch().
  void report(app::Run& run, const amp::GradScaler& scaler, int epoch) const {
    run.set_metric_field("loss_scale", scaler.get_scale());
    run.set_metric_field("loss_scale_min", lowest_);
    run.set_metric_field("skipped_steps", static_cast<double>(skipped_));
    if (skipped_ == 0) return;
    std::ostringstream note;
    note << "epoch " << epoch + 1 << ": " << skipped_ << " step(s) skipped (inf/NaN gradients); "
         << "scale " << std::setprecision(10) << scaler.get_scale();
    dist::log0(note.str());
  }

 private:
  std::int64_t skipped_ = 0;
  double lowest_;
};

}  // namespace mgpu::lesson08
