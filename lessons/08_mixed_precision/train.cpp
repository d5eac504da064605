// train: lesson 08's program. Trains a model on Fashion-MNIST in fp32, bf16 or fp16 with
// your Linear (task 3), your training step (task 4) and your GradScaler (tasks 1-2), on one
// rank or several (DistributedDataParallel, the library's reference of lesson 05).
//
//   build/solutions/08_mixed_precision/train --model cnn --precision bf16
//   build/solutions/08_mixed_precision/train --precision fp16 --scale-log fp16.scale.jsonl
//   build/solutions/08_mixed_precision/train --precision fp16 --no-loss-scaling   (what underflow costs)
//   tools/mpirun -np 2 build/solutions/08_mixed_precision/train --precision fp16
//   ... --checkpoint-dir /tmp/run --save-every 100, later the same with --resume auto: the
//   library's checkpoints of lesson 07, with GradScaler's state_dict among their extra state
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "mixed_precision.h"

namespace {

using namespace mgpu;
namespace l08 = mgpu::lesson08;
namespace par = mgpu::parallel;

struct AmpFlags {
  std::string precision = "fp16";
  bool no_loss_scaling = false;
  double init_scale = 65536.0;
  std::int64_t growth_interval = 2000;
  std::string scale_log;
  app::CheckpointFlags ck;      // --checkpoint-dir, --save-every, --keep-last, --resume
};

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

int train(const app::Options& opt, const AmpFlags& f) {
  // Step 0) one process per device, as in lesson 05; a CPU group for the reported sums.
  const int world = dist::world_size();
  const Device device = dist::rank_device(opt.device);
  dist::ProcessGroup& group = dist::init_process_group(opt.backend, device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> cpu_group = dist::new_group("mpi", Device::cpu(), quiet);
  const l08::Precision precision = l08::parse_precision(f.precision);
  app::Run run(opt, std::string("lesson 08: mixed precision (") + l08::precision_name(precision) +
                        ") on " + std::to_string(world) + " rank(s)", {device}, cpu_group.get());

  // Step 1) data: each rank its share of every epoch.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, world,
                                                           dist::rank(), true, opt.seed);
  auto train_loader = app::train_loader(data, opt, device, false, sampler);
  auto test_loader = app::test_loader(data, device, 1000, cpu_group.get());

  // Step 2) the model with your Linear, fp32 parameters (the master weights), under DDP.
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes(),
                              l08::make_linear);
  model->to(device);
  par::DistributedDataParallel ddp(model, group);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;

  // Step 3) the scaler: on for fp16 unless --no-loss-scaling; every rank decides together.
  amp::GradScalerOptions so;
  so.enabled = precision == l08::Precision::fp16 && !f.no_loss_scaling;
  so.init_scale = f.init_scale;
  so.growth_interval = f.growth_interval;
  l08::GradScaler scaler(so, world > 1 ? &group : nullptr);
  std::ostringstream scaling;
  scaling << std::setprecision(10) << "loss scaling " << (so.enabled ? "on" : "off");
  if (so.enabled)
    scaling << " (init_scale " << so.init_scale << ", growth_interval " << so.growth_interval
            << (world > 1 ? ", every rank skips together)" : ")");
  dist::log0("model: ", opt.model, " (", nn::model_summary(opt.model), "), ",
             model->num_parameters(), " fp32 parameters; GEMMs in ",
             l08::precision_name(precision), "; ", scaling.str(), "; batch ", opt.batch_size,
             " per rank, global ", opt.batch_size * world);

  // Step 4) resume (lesson 07's checkpoints, the library's reference): model, optimizer,
  // random streams, the position in the data, and the scaler's five numbers, so that the
  // resumed run continues the same scale sequence and skips the same steps.
  io::TrainingProgress p;
  p.world_size = world;
  p.batch_size = opt.batch_size;
  p.data_seed = opt.seed;
  app::Run::EpochSums resumed_sums;
  const std::string where = f.ck.resume == "auto" ? f.ck.dir : f.ck.resume;
  io::TrainingState st;
  std::string path;
  if (!where.empty() && io::load_checkpoint(*cpu_group, where, Device::cpu(), st, &path)) {
    MGPU_CHECK(st.progress.data_seed == opt.seed, path, " was trained with --seed ",
               st.progress.data_seed, "; resume with the same --seed");
    MGPU_CHECK(st.metadata["train_samples"] == std::to_string(data.train_samples), path,
               " was trained on ", st.metadata["train_samples"],
               " samples; resume with the same --train-samples");
    MGPU_CHECK(st.metadata.count("precision") != 0, path, " has no precision in its metadata: "
               "it was not saved by this program (lesson 08's train); start without --resume");
    MGPU_CHECK(st.metadata["precision"] == f.precision, path, " was trained with --precision ",
               st.metadata["precision"], "; resume with the same --precision");
    p = io::restore_training_state(st, *model, optimizer, path);
    if (scaler.is_enabled()) {
      MGPU_CHECK(st.extra.count("scaler") != 0, path, " holds no GradScaler state (saved with "
                 "--no-loss-scaling); resume with --no-loss-scaling too");
      scaler.load_state_dict(io::state_to_scalars(st.extra.at("scaler"), path));
    }
    const io::ResumePosition pos = io::resume_position(p, world, opt.batch_size);
    resumed_sums = pos.exact ? app::Run::epoch_sums_of(st.extra.at("run").at("epoch_sums"),
                                                       dist::rank())
                             : app::Run::EpochSums{};
    resumed_sums.steps = p.step_in_epoch = pos.step_in_epoch;
    p.world_size = world;
    p.batch_size = opt.batch_size;
    std::ostringstream note;
    note << std::setprecision(10) << "resumed from " << path << ": epoch " << p.epoch + 1
         << ", step " << p.step_in_epoch << " of it, global step " << p.global_step;
    if (scaler.is_enabled())
      note << "; loss scale " << scaler.get_scale() << ", growth tracker "
           << scaler.growth_tracker();
    if (!pos.exact) note << "\n  " << pos.note;
    dist::log0(note.str());
  } else if (!where.empty()) {
    dist::log0("nothing to resume in ", where, ": starting from scratch");
  }
  // A save is collective: rank 0 writes, every rank gives its epoch sums and waits.
  const auto save = [&] {
    io::TrainingState state = io::capture_training_state(*model, optimizer, p);
    state.extra["run"]["epoch_sums"] = run.gather_epoch_sums(*cpu_group);
    if (scaler.is_enabled()) state.extra["scaler"] = io::scalars_to_state(scaler.state_dict());
    state.metadata = {{"model", opt.model}, {"precision", f.precision},
                      {"train_samples", std::to_string(data.train_samples)}};
    const double begin = app::now_s();
    const std::string saved = io::save_checkpoint(*cpu_group, f.ck.dir, state, f.ck.keep_last);
    run.trace().span("compute", "checkpoint", begin, app::now_s());
    dist::log0("checkpoint: ", saved, " (", static_cast<int>(1e3 * (app::now_s() - begin)), " ms)");
  };

  ScaleLog scale_log(f.scale_log);
  for (int epoch = static_cast<int>(p.epoch); epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    train_loader->start_epoch(epoch, p.step_in_epoch);  // mid-epoch after a resume
    if (p.step_in_epoch > 0) run.resume_epoch(epoch, lr, *train_loader, resumed_sums);
    else run.start_epoch(epoch, lr, *train_loader);
    std::int64_t skipped = 0;
    double lowest_scale = scaler.get_scale();
    data::Batch batch;
    // Step 5) a batch, then your training step: autocast forward, fp32 loss, scaled
    // backward (DDP averages the gradients), unscale and check, step or skip, update.
    while (run.next_batch(batch)) {
      const l08::StepResult r = l08::train_step(ddp, loss_fn, optimizer, scaler, batch.inputs,
                                                batch.labels, precision);
      skipped += r.stepped ? 0 : 1;
      lowest_scale = std::min(lowest_scale, r.scale);
      scale_log.record(p.global_step + 1, epoch + 1, r.scale, !r.stepped);
      run.step(r.loss, batch.labels.numel(),
               r.logits.defined() ? app::count_correct(r.logits, batch.labels) : -1);
      // Step 6) where the run stands (a skipped step counts: the data moved on), and a
      // checkpoint every --save-every steps, after update() so the scaler's state is whole.
      p.epoch = epoch;
      p.step_in_epoch = run.epoch_steps();
      p.samples_in_epoch = p.step_in_epoch * opt.batch_size * world;
      ++p.global_step;
      if (!f.ck.dir.empty() && f.ck.save_every > 0 && p.global_step % f.ck.save_every == 0) save();
    }
    run.end_training();
    ddp.sync_buffers();
    // The metrics line: the scale at the end of the epoch, its lowest value and the steps
    // the scaler skipped in the epoch.
    run.set_metric_field("loss_scale", scaler.get_scale());
    run.set_metric_field("loss_scale_min", lowest_scale);
    run.set_metric_field("skipped_steps", static_cast<double>(skipped));
    if (skipped > 0) {
      std::ostringstream note;
      note << "epoch " << epoch + 1 << ": " << skipped << " step(s) skipped (inf/NaN gradients); "
           << "scale " << std::setprecision(10) << scaler.get_scale();
      dist::log0(note.str());
    }
    run.end_epoch(app::evaluate(*model, *test_loader, cpu_group.get()));
    p.epoch = epoch + 1;
    p.step_in_epoch = p.samples_in_epoch = 0;
    if (!f.ck.dir.empty() && f.ck.save_every == 0) save();
  }
  scale_log.record(p.global_step, opt.epochs, scaler.get_scale(), false, /*last=*/true);
  // Every rank's fingerprint: the replicas are identical only if every rank skipped the
  // same steps (§5 of the chapter), so a disagreement would show here.
  const std::uint64_t mine = io::fingerprint(io::module_state_dict(*model));
  Tensor all = Tensor::empty({world}, DType::i64);
  cpu_group->all_gather(all, Tensor::from_vector<std::int64_t>(
                                 {static_cast<std::int64_t>(mine)}, {1})).wait();
  int differing = 0;
  for (std::int64_t v : all.to_vector<std::int64_t>())
    differing += static_cast<std::uint64_t>(v) != mine ? 1 : 0;
  std::ostringstream end_state;
  end_state << std::setprecision(10) << "scaler: scale=" << scaler.get_scale()
            << " growth_tracker=" << scaler.growth_tracker() << "\nweights: fnv1a64=" << std::hex
            << mine << std::dec << " (bit-identical runs print the same; "
            << (differing == 0 ? "the same on all " + std::to_string(world) + " rank(s))"
                               : std::to_string(differing) + " rank(s) differ from rank 0)");
  dist::log0(end_state.str());
  MGPU_CHECK(differing == 0, "the replicas' weights differ after training (", differing,
             " rank(s) differ from rank 0): did the ranks skip different steps?");
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";  // as lessons 01 and 05
  AmpFlags f;
  CLI::App cli{"Lesson 08: train a model on Fashion-MNIST with mixed precision (fp32, bf16, "
               "or fp16 with GradScaler); start it with tools/mpirun -np N for several ranks."};
  app::FlagSet flags;
  flags.models = {"mlp", "cnn", "mlp-bn", "deep-mlp", "cnn-small"};
  flags.lr_schedule = true;
  flags.backend = true;
  flags.device_help = "cpu, or cuda (rank r uses cuda:<local rank>), or cuda:N";
  app::add_flags(cli, opt, flags);
  cli.add_option("--precision", f.precision, "fp32, bf16 or fp16 (the GEMMs' dtype)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  cli.add_flag("--no-loss-scaling", f.no_loss_scaling,
               "fp16 without GradScaler (to see what underflow costs without it)");
  cli.add_option("--init-scale", f.init_scale, "GradScaler's first scale")
      ->check(app::real_in(1e-30, 3.4e38))->capture_default_str();
  cli.add_option("--growth-interval", f.growth_interval,
                 "clean steps in a row before the scale doubles")
      ->check(app::positive_integer())->capture_default_str();
  cli.add_option("--scale-log", f.scale_log,
                 "JSON lines of the loss scale's changes and skipped steps (plot_scale.py)");
  app::add_checkpoint_flags(cli, f.ck);
  CLI11_PARSE(cli, argc, argv);
  if (!app::checkpoint_flags_ok(f.ck)) return 1;
  return app::run_distributed(&argc, &argv, [&] { return train(opt, f); });
}
