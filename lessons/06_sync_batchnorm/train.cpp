// train: lesson 06's program. Trains a model with BatchNorm on Fashion-MNIST under DDP (the
// library's, lesson 05's reference) on every rank. With --sync-bn your
// convert_sync_batchnorm turns its BatchNorms into your SyncBatchNorm first, so that they
// normalise with the statistics of the world's batch instead of the rank's own.
// After each epoch the test set is evaluated twice: in eval mode (the running statistics)
// and in train mode (each batch of --batch-size per rank normalised with its own
// statistics: the rank's, or with --sync-bn the world's), and the gap is printed.
//
//   tools/mpirun -np 4 build/solutions/06_sync_batchnorm/train --model cnn-small --batch-size 8
//   tools/mpirun -np 4 build/solutions/06_sync_batchnorm/train --model cnn-small --batch-size 8 --sync-bn
//   tools/mpirun -np 2 build/solutions/06_sync_batchnorm/train --sync-bn --trace t.json --steps 50
//   build/lessons/06_sync_batchnorm/train --data synthetic --epochs 1 --sync-bn   (a world of 1)
#include <cstdio>
#include <string>
#include <vector>

#include "mgpu/app/app.h"
#include "mgpu/copy.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "sync_bn_lesson.h"

namespace {

using namespace mgpu;
namespace par = mgpu::parallel;
namespace l06 = mgpu::lesson06;

// "91.23%" (a gap may be negative: "-0.41%").
std::string pct(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100.0 * fraction);
  return text;
}

// Every SyncBatchNorm (or BatchNorm) of a model tree, depth first.
template <typename Layer>
void find_layers(nn::Module& m, std::vector<Layer*>& out) {
  if (auto* l = dynamic_cast<Layer*>(&m)) out.push_back(l);
  for (const auto& child : m.children()) find_layers(*child.second, out);
}

// The test set in train mode: every batch normalised with its own statistics (the rank's
// batch, or the world's for SyncBatchNorm), as during training. The running statistics
// are put back afterwards: this pass must not move them.
app::EvalResult evaluate_in_train_mode(nn::Module& model, data::DataLoader& loader,
                                       dist::ProcessGroup& cpu_group) {
  std::vector<Tensor> saved;
  for (auto& b : model.named_buffers()) saved.push_back(b.second->clone());
  model.train();
  const app::EvalResult r = app::evaluate(
      [&](const Tensor& x) {
        Tensor y = model.forward(x);
        model.clear_saved();  // no backward follows
        return y;
      },
      loader, &cpu_group);
  std::size_t i = 0;
  for (auto& b : model.named_buffers()) copy_(*b.second, saved[i++]);
  return r;
}

// With SyncBatchNorm every rank must run the same number of forwards: refuse a test split
// that gives some rank one batch more (it would wait for the others in an all_gather).
void check_equal_batches(const data::DataLoader& loader, dist::ProcessGroup& cpu_group) {
  Tensor n = Tensor::from_vector(std::vector<std::int64_t>{loader.num_batches(), -loader.num_batches()}, {2});
  cpu_group.all_reduce(n, dist::ReduceOp::max).wait();
  const std::vector<std::int64_t> v = n.to_vector<std::int64_t>();
  MGPU_CHECK(v[0] == -v[1], "train-mode evaluation: the ranks' test shares give ", -v[1], " to ",
             v[0], " batches of --batch-size; SyncBatchNorm needs the same number on every "
             "rank (choose another --batch-size or number of ranks)");
}

int train(const app::Options& opt, bool sync_bn, bool train_mode_eval) {
  // Step 0) one process per device: this rank's device, its group, a CPU group for the
  // numbers every rank contributes to (loss and accuracy sums, the trace).
  const int rank = dist::rank(), world = dist::world_size();
  const Device device = dist::rank_device(opt.device);
  dist::ProcessGroup& group = dist::init_process_group(opt.backend, device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> cpu_group = dist::new_group("mpi", Device::cpu(), quiet);
  app::Run run(opt, "lesson 06: DDP with " + std::string(sync_bn ? "SyncBatchNorm" : "BatchNorm") +
                        " on " + std::to_string(world) + " rank(s), backend " + group.backend_name(),
               {device}, cpu_group.get());

  // Step 1) data: each rank trains on its share (DistributedSampler); the test set is split
  // over the ranks, in batches of 1000 (eval mode) and of --batch-size (train mode).
  const app::Data data = app::open_data(opt);
  auto sampler = std::make_shared<par::DistributedSampler>(data.train_samples, world, rank, true,
                                                           opt.seed);
  auto train_loader = app::train_loader(data, opt, device, false, sampler);
  auto test_loader = app::test_loader(data, device, 1000, cpu_group.get());
  auto batch_test_loader = app::test_loader(data, device, opt.batch_size, cpu_group.get());
  if (sync_bn && train_mode_eval) check_equal_batches(*batch_test_loader, *cpu_group);

  // Step 2) the model; with --sync-bn its BatchNorms become SyncBatchNorms (before DDP,
  // which registers hooks on the parameters it finds); then DDP.
  nn::manual_seed(opt.seed);
  std::shared_ptr<nn::Module> model =
      nn::make_model(opt.model, data.train->sample_shape(), data.train->num_classes());
  model->to(device);
  std::vector<nn::BatchNorm*> batchnorms;
  find_layers(*model, batchnorms);
  MGPU_CHECK(!batchnorms.empty(), "--model ", opt.model, " has no BatchNorm layer; this lesson ",
             "needs one (cnn, cnn-small or mlp-bn)");
  std::string channels;
  for (nn::BatchNorm* bn : batchnorms) channels += " " + std::to_string(bn->num_features());
  if (sync_bn) {
    model = l06::convert_sync_batchnorm(model);
    std::vector<par::SyncBatchNorm*> synced;
    find_layers(*model, synced);
    // Each synchronised step on the rank's "syncbn" track of the trace.
    for (par::SyncBatchNorm* l : synced)
      if (run.trace().on())
        l->set_step_observer([&run](const char* what, double b, double e, std::int64_t bytes) {
          run.trace().span("syncbn", what, b, e, {{"bytes", static_cast<double>(bytes)}});
        });
  }
  par::DistributedDataParallel ddp(model, group);
  par::CommTimer comm_timer;  // each bucket's all-reduce, for the trace
  if (run.trace().on()) ddp.reducer().set_comm_timer(&comm_timer);
  optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  dist::log0("model: ", opt.model, " (", nn::model_summary(opt.model), "), ",
             model->num_parameters(), " parameters; ", optimizer.describe(), ", ", opt.schedule,
             " schedule over ", opt.epochs, " epochs");
  dist::log0("BatchNorm layers: ", batchnorms.size(), " (channels", channels, "); ",
             sync_bn ? "SyncBatchNorm: per step and layer one all_gather of W x (2C+1) and one "
                       "all_reduce of 2C values"
                     : "each rank normalises with its own batch's statistics");
  dist::log0("batch: ", opt.batch_size, " per rank, global ", opt.batch_size * world,
             "; BatchNorm statistics over ", sync_bn ? opt.batch_size * world : opt.batch_size,
             " samples");

  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    optimizer.set_lr(lr);
    sampler->set_epoch(epoch);
    train_loader->start_epoch(epoch);
    run.start_epoch(epoch, lr, *train_loader);
    data::Batch batch;
    // Step 3) this rank's next batch.
    while (run.next_batch(batch)) {
      // Step 4) forward: with --sync-bn each SyncBatchNorm waits for one all_gather.
      optimizer.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      // Step 5) backward: each SyncBatchNorm waits for one all_reduce; DDP's buckets are
      // all-reduced as their gradients become final.
      ddp.backward(loss_fn.backward());
      // Step 6) the same averaged gradients on every rank.
      const double opt_begin = app::now_s();
      optimizer.step();
      if (run.trace().on()) {
        synchronize(device);
        const par::StepTimeline& t = ddp.last_step();
        run.trace().span("compute", "forward", t.forward_begin, t.forward_end);
        run.trace().span("compute", "backward", t.backward_begin, t.backward_end);
        run.trace().span("compute", "wait for buckets", t.backward_end, t.reduce_end);
        run.trace().span("compute", "optimizer", opt_begin, app::now_s());
        for (const par::BucketTiming& b : comm_timer.take())
          run.trace().span("comm", "all-reduce bucket " + std::to_string(b.bucket), b.launch_s,
                           b.done_s, {{"bytes", static_cast<double>(b.bytes)}});
      }
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
    }
    run.end_training();
    // Step 7) the test set in train mode (batch statistics, as in training) and in eval
    // mode (rank 0's running statistics on every rank); the epoch line reports eval mode.
    ddp.sync_buffers();
    const app::EvalResult eval_mode = app::evaluate(*model, *test_loader, cpu_group.get());
    if (train_mode_eval) {
      const app::EvalResult batch_mode =
          evaluate_in_train_mode(*model, *batch_test_loader, *cpu_group);
      dist::log0("  BatchNorm test accuracy: train mode (statistics of ",
                 sync_bn ? opt.batch_size * world : opt.batch_size, " samples) ",
                 pct(batch_mode.accuracy), ", eval mode (running statistics) ",
                 pct(eval_mode.accuracy), ", gap ",
                 pct(batch_mode.accuracy - eval_mode.accuracy));
    }
    run.end_epoch(eval_mode);
  }
  return run.finish();
}

}  // namespace

int main(int argc, char** argv) {
  app::Options opt;
  opt.model = "cnn-small";
  opt.schedule = "cosine";
  bool sync_bn = false, no_train_mode_eval = false;
  CLI::App cli{"Lesson 06: train a BatchNorm model on Fashion-MNIST under DDP, with or without "
               "SyncBatchNorm (start it with tools/mpirun -np N)."};
  app::FlagSet flags;
  flags.models = {"cnn-small", "cnn", "mlp-bn"};
  flags.lr_schedule = true;
  flags.backend = true;
  flags.device_help = "cpu, or cuda (rank r uses cuda:<local rank>), or cuda:N";
  app::add_flags(cli, opt, flags);
  cli.add_flag("--sync-bn", sync_bn,
               "convert every BatchNorm to SyncBatchNorm (your convert_sync_batchnorm)");
  cli.add_flag("--no-train-mode-eval", no_train_mode_eval,
               "skip the test pass in train mode (batch statistics) after each epoch");
  CLI11_PARSE(cli, argc, argv);
  return app::run_distributed(&argc, &argv,
                              [&] { return train(opt, sync_bn, !no_train_mode_eval); });
}
