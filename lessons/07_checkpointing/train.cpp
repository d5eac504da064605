// train: lesson 07's program. Lesson 05's DDP training (the library's DDP) with checkpoints
// made by your pieces: capture_state and the writer every --save-every steps, the atomic
// save on rank 0; at --resume, every rank reads the file with your reader and
// restore_state puts it back. Kill it with kill -9 at any moment and resume: the run ends
// with the same weights and the same `final:` numbers as one never interrupted (CPU).
//
//   tools/mpirun -np 2 build/solutions/07_checkpointing/train --data synthetic
//       --epochs 3 --train-samples 6000 --checkpoint-dir /tmp/run --save-every 25
//   (one command line; kill -9 a rank mid-run, then the same command with --resume auto)
#include "checkpoint_lesson.h"
#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"

namespace {

using namespace mgpu;
namespace l07 = mgpu::lesson07;

int train(const app::Options& opt, const app::CheckpointFlags& ck) {
  // Step 0) one process per device, as in lesson 05.
  const int rank = dist::rank(), world = dist::world_size();
  const Device device = dist::rank_device(opt.device);
  dist::ProcessGroup& group = dist::init_process_group(opt.backend, device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> cpu = dist::new_group("mpi", Device::cpu(), quiet);
  app::Run run(opt, "lesson 07: DDP training with checkpoints on " + std::to_string(world) +
                        " rank(s)", {device}, cpu.get());

  // Step 1) data, model, DDP, optimizer: built from the flags, the same on a restart.
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<parallel::DistributedSampler>(data.train_samples, world, rank,
                                                                true, opt.seed);
  auto train_loader = app::train_loader(data, opt, device, false, sampler);
  auto test_loader = app::test_loader(data, device, 1000, cpu.get());
  nn::manual_seed(opt.seed);
  auto model = nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(device);
  parallel::DistributedDataParallel ddp(model, group);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  dist::log0("model: ", opt.model, " (", nn::model_summary(opt.model), "), ",
             model->num_parameters(), " parameters");

  // Step 2) resume: every rank reads the checkpoint with your reader, restore_state puts
  // model, optimizer and random streams back; the data continues where it stopped.
  io::TrainingProgress p;
  p.world_size = world;
  p.batch_size = opt.batch_size;
  p.data_seed = opt.seed;
  app::Run::EpochSums resumed_sums;
  io::TrainingState st;
  std::string path;
  const std::string where = ck.resume == "auto" ? ck.dir : ck.resume;
  if (!where.empty() && io::load_checkpoint(*cpu, where, Device::cpu(), st, &path, l07::parse_safetensors)) {
    MGPU_CHECK(st.progress.data_seed == opt.seed, path, " was trained with --seed ",
               st.progress.data_seed, "; resume with the same --seed");
    MGPU_CHECK(st.metadata["train_samples"] == std::to_string(data.train_samples), path,
               " was trained on ", st.metadata["train_samples"], " samples; resume with the same --train-samples");
    p = l07::restore_state(st, *model, optimizer);
    const io::ResumePosition pos = io::resume_position(p, world, opt.batch_size);
    resumed_sums = pos.exact ? app::Run::epoch_sums_of(st.extra.at("run").at("epoch_sums"), rank)
                              : app::Run::EpochSums{};
    resumed_sums.steps = pos.step_in_epoch;
    p.step_in_epoch = pos.step_in_epoch;
    p.world_size = world;
    p.batch_size = opt.batch_size;
    dist::log0("resumed from ", path, ": epoch ", p.epoch + 1, ", step ", p.step_in_epoch,
               " of it, global step ", p.global_step, pos.exact ? "" : "\n  " + pos.note);
  } else if (!where.empty()) {
    dist::log0("nothing to resume in ", where, ": starting from scratch");
  }
  // rank 0 alone writes; everyone takes part (the epoch sums, the barrier of the save).
  const auto save = [&] {
    io::TrainingState state = l07::capture_state(*model, optimizer, p);
    // Every rank's sums of the epoch in progress: a resumed epoch reports what an
    // uninterrupted one would.
    state.extra["run"]["epoch_sums"] = run.gather_epoch_sums(*cpu);
    state.metadata = {{"model", opt.model}, {"train_samples", std::to_string(data.train_samples)}};
    const double begin = app::now_s();
    const std::string saved = l07::save_on_rank0(*cpu, ck.dir, p.global_step, [&] {
      const io::SafetensorsFile f = io::to_checkpoint_file(state);
      return l07::serialize_safetensors(f.tensors, f.metadata);
    }, ck.keep_last);
    run.trace().span("compute", "checkpoint", begin, app::now_s());
    dist::log0("checkpoint: ", saved, " (", static_cast<int>(1e3 * (app::now_s() - begin)), " ms)");
  };

  for (int epoch = static_cast<int>(p.epoch); epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    train_loader->start_epoch(epoch, p.step_in_epoch);  // mid-epoch after a resume
    if (p.step_in_epoch > 0) run.resume_epoch(epoch, lr, *train_loader, resumed_sums);
    else run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 3) lesson 05's step.
    while (run.next_batch(batch)) {
      optimizer.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      ddp.backward(loss_fn.backward());
      optimizer.step();
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
      // Step 4) where the run stands, and a checkpoint every --save-every steps.
      p.epoch = epoch;
      p.step_in_epoch = run.epoch_steps();
      p.samples_in_epoch = p.step_in_epoch * opt.batch_size * world;
      ++p.global_step;
      if (!ck.dir.empty() && ck.save_every > 0 && p.global_step % ck.save_every == 0) save();
    }
    run.end_training();
    ddp.sync_buffers();
    run.end_epoch(app::evaluate(*model, *test_loader, cpu.get()));
    p.epoch = epoch + 1;
    p.step_in_epoch = p.samples_in_epoch = 0;
    if (!ck.dir.empty() && ck.save_every == 0) save();
  }
  dist::log0("weights: fnv1a64=", std::hex, io::fingerprint(io::module_state_dict(*model)), std::dec,
             " (bit-identical runs print the same)");
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.schedule = "cosine";  // as lessons 01 and 05
  app::CheckpointFlags ck;
  CLI::App cli{"Lesson 07: lesson 05's DDP training with checkpoints; kill it and resume "
               "(start it with tools/mpirun -np N)."};
  app::FlagSet flags;
  flags.models = {"mlp", "cnn", "mlp-bn", "deep-mlp", "cnn-small"};
  flags.lr_schedule = true;
  flags.backend = true;
  app::add_flags(cli, opt, flags);
  app::add_checkpoint_flags(cli, ck);
  CLI11_PARSE(cli, argc, argv);
  if (!app::checkpoint_flags_ok(ck)) return 1;
  return app::run_distributed(&argc, &argv, [&] { return train(opt, ck); });
}
