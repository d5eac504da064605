// train: lesson 05's program. Trains lesson 01's MLP or CNN on Fashion-MNIST with
// DistributedDataParallel, whose missing pieces are yours: one process per device, each on
// its own share of every epoch (your DistributedSampler), gradients averaged bucket by
// bucket while backward runs (your bucket assignment, hook, finalize and rebuild).
//
//   mpirun -np 2 build/solutions/05_ddp/train --model cnn
//   mpirun -np 2 build/solutions/05_ddp/train --model mlp --trace ddp.json --steps 50
//   mpirun -np 2 build/solutions/05_ddp/train --device cuda --backend nccl   (one GPU per rank)
//   build/lessons/05_ddp/train --data synthetic --epochs 1                  (a world of 1)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/data/all.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "mgpu/stream.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace data = mgpu::data;
namespace dist = mgpu::dist;
namespace nn = mgpu::nn;
namespace par = mgpu::parallel;

struct Options {
  std::string model = "mlp";
  std::string device = "cpu";
  std::string backend = "auto";
  std::string data = data::FashionMNIST::kDefaultDir;
  int epochs = 10;
  std::int64_t batch_size = 64;  // per rank, as in PyTorch
  double lr = 0.01;
  std::string schedule = "cosine";  // as lesson 01, so the two runs compare like for like
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::uint64_t seed = 0;
  std::int64_t train_samples = 0;  // 0: the whole training set
  std::int64_t steps = 0;          // 0: whole epochs
  double bucket_cap_mb = 25.0;
  bool bucket_cap_given = false;  // PyTorch: a 1 MiB first bucket only when not given
  bool find_unused = false;
  bool no_set_epoch = false;      // the pitfall: every epoch repeats the first one's order
  bool no_broadcast_buffers = false;
  bool no_sampler = false;  // the pitfall: every rank reads everything in the same order
  std::string comm_hook = "allreduce";
  std::string metrics, trace;
};

// The test set split across ranks without padding (rank r takes r, r + W, ...), so every
// test image is counted exactly once when the ranks' counts are summed.
class StridedSampler : public data::Sampler {
 public:
  StridedSampler(std::int64_t n, int world, int rank) : n_(n), world_(world), rank_(rank) {}
  std::vector<std::int64_t> indices(std::int64_t) const override {
    std::vector<std::int64_t> out;
    for (std::int64_t i = rank_; i < n_; i += world_) out.push_back(i);
    return out;
  }

 private:
  std::int64_t n_;
  int world_, rank_;
};

std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const std::vector<std::int64_t> pred = mgpu::argmax_last(logits).to_vector<std::int64_t>();
  const std::vector<std::int64_t> want = labels.to_vector<std::int64_t>();
  std::int64_t n = 0;
  for (std::size_t i = 0; i < pred.size(); ++i) n += pred[i] == want[i];
  return n;
}

// Sums `values` over all ranks (every rank gets the sums): how loss and accuracy reach rank 0.
std::vector<double> sum_over_ranks(dist::ProcessGroup& group, const std::vector<double>& values) {
  Tensor t = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  group.all_reduce(t, dist::ReduceOp::sum).wait();
  return t.to_vector<double>();
}

// Chrome trace events of this rank (pid = rank): compute phases on one track, each
// bucket's all-reduce on another. Rank 0 gathers every rank's events into one file.
class RankTrace {
 public:
  RankTrace(bool on, int rank, double t0) : on_(on), rank_(rank), t0_(t0) {}
  bool on() const { return on_; }
  void span(const std::string& name, const char* track, double begin_s, double end_s,
            nlohmann::json args = nullptr) {
    if (!on_ || end_s < begin_s) return;
    nlohmann::json e{{"name", name}, {"ph", "X"}, {"pid", rank_}, {"tid", track},
                     {"ts", (begin_s - t0_) * 1e6}, {"dur", (end_s - begin_s) * 1e6}};
    if (!args.is_null()) e["args"] = std::move(args);
    events_.push_back(std::move(e));
  }
  // The phases of one DDP step, from the timeline DDP recorded and the comm timer.
  void step(const par::StepTimeline& t, const std::vector<par::BucketTiming>& buckets,
            double opt_begin, double opt_end) {
    span("forward", "compute", t.forward_begin, t.forward_end);
    span("backward", "compute", t.backward_begin, t.backward_end);
    span("wait for buckets", "compute", t.backward_end, t.reduce_end);
    span("optimizer", "compute", opt_begin, opt_end);
    for (const par::BucketTiming& b : buckets)
      span("all-reduce bucket " + std::to_string(b.bucket), "comm", b.launch_s, b.done_s,
           {{"bytes", b.bytes}});
  }
  // Sends this rank's events to rank 0 (point to point on the CPU group); rank 0 writes.
  void gather_and_write(dist::ProcessGroup& group, const std::string& path) {
    if (!on_) return;
    std::string text = nlohmann::json(events_).dump();
    if (group.rank() != 0) {
      Tensor len = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(text.size())}, {1});
      group.send(len, 0, 1).wait();
      group.send(pack(text), 0, 2).wait();
      return;
    }
    nlohmann::json all = nlohmann::json::array();
    for (int r = 0; r < group.size(); ++r) {
      all.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r},
                     {"args", {{"name", "rank " + std::to_string(r)}}}});
      std::string part = text;
      if (r != 0) {
        Tensor len = Tensor::zeros({1}, mgpu::DType::i64);
        group.recv(len, r, 1).wait();
        const auto n = static_cast<std::size_t>(len.to_vector<std::int64_t>()[0]);
        Tensor buf = Tensor::zeros({static_cast<std::int64_t>((n + 3) / 4)}, mgpu::DType::i32);
        group.recv(buf, r, 2).wait();
        part.assign(static_cast<const char*>(buf.raw_data()), n);
      }
      for (auto& e : nlohmann::json::parse(part)) all.push_back(std::move(e));
    }
    std::ofstream out(path);
    MGPU_CHECK(out.good(), "--trace: cannot write ", path);
    out << nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  }

 private:
  static Tensor pack(const std::string& s) {  // bytes into i32 words (the library has no u8)
    Tensor t = Tensor::zeros({static_cast<std::int64_t>((s.size() + 3) / 4)}, mgpu::DType::i32);
    std::memcpy(t.raw_data(), s.data(), s.size());
    return t;
  }
  bool on_;
  int rank_;
  double t0_;
  std::vector<nlohmann::json> events_;
};

int run(const Options& opt) {
  const int rank = dist::rank(), world = dist::world_size();
  const bool main_rank = rank == 0;
  // Under mpirun a rank's stdout is a pseudo-terminal even when mpirun's output goes to a
  // file, so the progress line is opt-in there (MGPU_PROGRESS=1).
  const char* progress = std::getenv("MGPU_PROGRESS");
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  const bool terminal = main_rank && isatty(fileno(stdout)) != 0 &&
                        (progress ? std::strcmp(progress, "0") != 0 : !under_mpirun);

  // Step 0) one process per device: this rank's device, its group, a CPU group for logging.
  const Device device = dist::rank_device(opt.device);
  dist::ProcessGroup& group = dist::init_process_group(opt.backend, device);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> cpu_group = dist::new_group("mpi", Device::cpu(), quiet);
  std::string mapping = mgpu::describe_mapping({device});
  while (!mapping.empty() && mapping.back() == '\n') mapping.pop_back();
  dist::log0("lesson 05: DistributedDataParallel on ", world, " rank(s), backend ",
             group.backend_name());
  dist::log_all(mapping);

  // Step 1) data: every rank reads the whole dataset and trains on its share of it.
  auto train_set = data::open_dataset(opt.data, data::Split::train, opt.seed);
  auto test_set = data::open_dataset(opt.data, data::Split::test, opt.seed);
  MGPU_CHECK(opt.train_samples >= 0 && opt.train_samples <= train_set->size(),
             "--train-samples ", opt.train_samples, " is not in [0, ", train_set->size(), "]");
  const std::int64_t n_train = opt.train_samples > 0 ? opt.train_samples : train_set->size();
  auto sampler = std::make_shared<par::DistributedSampler>(n_train, world, rank, true, opt.seed);
  data::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.seed = opt.seed;
  lo.device = device;
  // --no-distributed-sampler: the same seed on every rank gives every rank the same batches.
  std::shared_ptr<data::Sampler> train_sampler = sampler;
  if (opt.no_sampler) train_sampler = std::make_shared<data::RandomSampler>(n_train, true, opt.seed);
  data::DataLoader train_loader(train_set, lo, train_sampler);
  lo.batch_size = 1000;
  lo.shuffle = false;
  data::DataLoader test_loader(test_set, lo,
                               std::make_shared<StridedSampler>(test_set->size(), world, rank));
  dist::log0("data: ", train_set->describe(), " (using ", n_train, ")\n      ",
             test_set->describe());

  // Step 2) the model on this rank's device, wrapped: DDP checks that all ranks built the
  // same model and copies rank 0's weights to every rank.
  nn::manual_seed(opt.seed);
  auto model = nn::fashion_mnist_model(opt.model);  // lesson 01's models
  model->to(device);
  par::DDPOptions ddp_options;
  if (opt.bucket_cap_given) ddp_options.bucket_cap_mb = opt.bucket_cap_mb;
  ddp_options.find_unused_parameters = opt.find_unused;
  ddp_options.broadcast_buffers = !opt.no_broadcast_buffers;
  par::DistributedDataParallel ddp(model, group, ddp_options);
  if (opt.comm_hook == "fp16") ddp.register_comm_hook(par::fp16_compress_hook);
  par::CommTimer comm_timer;  // each bucket's all-reduce, for the trace
  if (!opt.trace.empty()) ddp.reducer().set_comm_timer(&comm_timer);
  mgpu::optim::SGD optimizer(ddp.parameters(), {opt.lr, opt.momentum, opt.weight_decay});
  nn::CrossEntropyLoss loss_fn;
  std::int64_t steps_per_epoch = train_loader.num_batches();
  if (opt.steps > 0 && opt.steps < steps_per_epoch) steps_per_epoch = opt.steps;
  dist::log0("model: ", opt.model, ", ", model->num_parameters(), " parameters; ",
             optimizer.describe(), ", ", opt.schedule, " schedule over ", opt.epochs,
             " epochs; comm hook: ", opt.comm_hook);
  dist::log0(ddp.describe(), opt.find_unused ? "" : " (first iteration: one bucket; "
             "rebuilt in gradient-ready order before the second)", "\n", ddp.bucket_summary());
  dist::log0("batch: ", opt.batch_size, " per rank, global ", opt.batch_size * world, " (",
             world, " rank(s)); ", train_loader.num_samples(), " samples and ", steps_per_epoch,
             " steps per rank per epoch",
             opt.no_sampler ? " (no DistributedSampler: every rank sees the same batches!)" : "");

  std::ofstream metrics;
  if (main_rank && !opt.metrics.empty()) {
    metrics.open(opt.metrics);
    MGPU_CHECK(metrics.good(), "--metrics: cannot write ", opt.metrics);
  }
  cpu_group->barrier().wait();  // a common time origin for every rank's trace
  const double run_start = par::clock_s();
  RankTrace trace(!opt.trace.empty(), rank, run_start);

  double train_time = 0, last_train_loss = 0, last_test_acc = 0;
  std::vector<std::int64_t> first_order;  // this rank's sample order in epoch 1
  std::int64_t trained_samples = 0;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    // The learning rate of this epoch, as in lesson 01: constant, or a half cosine from
    // --lr down towards 0. Every rank computes the same value: no communication needed.
    const double pi = std::acos(-1.0);
    optimizer.set_lr(opt.schedule == "cosine"
                         ? opt.lr * 0.5 * (1.0 + std::cos(pi * epoch / opt.epochs))
                         : opt.lr);
    mgpu::synchronize(device);
    const double epoch_start = par::clock_s();
    // Without this, every epoch would visit the samples in the first epoch's order: the
    // sampler shuffles for the epoch it was told, not the loader's (as in PyTorch).
    if (!opt.no_set_epoch) sampler->set_epoch(epoch);
    if (epoch > 0 && !opt.no_sampler && sampler->indices() == first_order)
      dist::log0("epoch ", epoch + 1, ": the same sample order as epoch 1 (",
                 opt.no_set_epoch ? "--no-set-epoch: " : "", "set_epoch was not called)");
    if (epoch == 0) first_order = sampler->indices();
    train_loader.start_epoch(epoch);
    double loss_sum = 0;
    std::int64_t correct = 0, seen = 0, steps = 0;
    double last_print = 0;
    data::Batch batch;
    while (steps < steps_per_epoch) {
      // Step 3) this rank's next batch.
      const double t_data = par::clock_s();
      if (!train_loader.next(batch)) break;
      trace.span("data wait", "compute", t_data, par::clock_s());
      // Step 4) forward and loss on this rank's batch.
      optimizer.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      // Step 5) backward: buckets are all-reduced as their gradients become final.
      ddp.backward(loss_fn.backward());
      // Step 6) the same averaged gradients on every rank: the same update everywhere.
      const double t_opt = par::clock_s();
      optimizer.step();
      if (trace.on()) mgpu::synchronize(device);
      trace.step(ddp.last_step(), comm_timer.take(), t_opt, par::clock_s());
      if (ddp.last_step().rebuilt_buckets) {
        std::string order;
        for (std::size_t v : ddp.reducer().rebuilt_from_order())
          order += " " + ddp.reducer().variables()[v]->name();
        dist::log0("buckets rebuilt before step ", steps + 1, "; rank 0's gradients became ready "
                   "in the order:", order, "\n", ddp.bucket_summary());
      }
      const std::int64_t n = batch.labels.numel();
      loss_sum += loss * static_cast<double>(n);
      correct += count_correct(logits, batch.labels);
      seen += n;
      ++steps;
      if (terminal && par::clock_s() - last_print > 0.25) {
        last_print = par::clock_s();
        std::printf("\repoch %d/%d  step %lld/%lld  loss %.4f (rank 0) ", epoch + 1, opt.epochs,
                    static_cast<long long>(steps), static_cast<long long>(steps_per_epoch),
                    loss_sum / static_cast<double>(seen));
        std::fflush(stdout);
      }
    }
    mgpu::synchronize(device);
    const double epoch_time = par::clock_s() - epoch_start;
    if (terminal) std::printf("\r%*s\r", 70, "");

    // Step 7) evaluate: rank 0's BatchNorm statistics everywhere, each rank a strided part
    // of the test set, the counts summed over ranks.
    ddp.sync_buffers();
    model->eval();
    test_loader.start_epoch(0);
    double test_loss_sum = 0;
    std::int64_t test_correct = 0, test_seen = 0;
    while (test_loader.next(batch)) {
      const Tensor logits = model->forward(batch.inputs);
      const std::int64_t n = batch.labels.numel();
      test_loss_sum += loss_fn.forward(logits, batch.labels).item() * static_cast<double>(n);
      test_correct += count_correct(logits, batch.labels);
      test_seen += n;
    }
    model->train();
    const std::vector<double> s = sum_over_ranks(
        *cpu_group, {loss_sum, static_cast<double>(correct), static_cast<double>(seen),
                     test_loss_sum, static_cast<double>(test_correct),
                     static_cast<double>(test_seen)});
    // Step 8) rank 0 reports for everyone.
    const double all_seen = s[2];
    const double train_loss = all_seen > 0 ? s[0] / all_seen : 0;
    const double train_acc = all_seen > 0 ? s[1] / all_seen : 0;
    const double test_loss = s[5] > 0 ? s[3] / s[5] : 0, test_acc = s[5] > 0 ? s[4] / s[5] : 0;
    const double samples_per_s = epoch_time > 0 ? all_seen / epoch_time : 0;
    const double step_ms = steps ? 1e3 * epoch_time / static_cast<double>(steps) : 0;
    train_time += epoch_time;
    trained_samples += static_cast<std::int64_t>(all_seen);
    last_train_loss = train_loss;
    last_test_acc = test_acc;
    if (main_rank) {
      std::printf("epoch %d/%d: train_loss=%.4f train_acc=%.4f test_loss=%.4f test_acc=%.4f "
                  "samples_per_s=%.0f step_ms=%.2f data_wait_s=%.2f world_size=%d time_s=%.1f\n",
                  epoch + 1, opt.epochs, train_loss, train_acc, test_loss, test_acc,
                  samples_per_s, step_ms, train_loader.wait_seconds(), world,
                  par::clock_s() - run_start);
      std::fflush(stdout);
    }
    if (metrics.is_open()) {
      metrics << nlohmann::json{{"epoch", epoch + 1},         {"train_loss", train_loss},
                                {"train_acc", train_acc},     {"test_loss", test_loss},
                                {"test_acc", test_acc},       {"samples_per_s", samples_per_s},
                                {"step_ms", step_ms},         {"world_size", world},
                                {"global_batch", opt.batch_size * world},
                                {"data_wait_s", train_loader.wait_seconds()},
                                {"time_s", par::clock_s() - run_start}}
                     .dump()
              << "\n";
      metrics.flush();
    }
  }
  if (trace.on()) {
    trace.gather_and_write(*cpu_group, opt.trace);
    dist::log0("trace: ", opt.trace, " (open it in https://ui.perfetto.dev)");
  }
  if (main_rank)
    std::printf("final: test_acc=%.4f train_loss=%.4f samples_per_s=%.0f time_s=%.1f\n",
                last_test_acc, last_train_loss,
                train_time > 0 ? static_cast<double>(trained_samples) / train_time : 0.0,
                par::clock_s() - run_start);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Lesson 05: train an MLP or a CNN on Fashion-MNIST with DistributedDataParallel "
               "(start it with mpirun -np N)."};
  app.add_option("--model", opt.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app.add_option("--device", opt.device, "cpu, or cuda (rank r uses cuda:<local rank>), or cuda:N")
      ->capture_default_str();
  app.add_option("--backend", opt.backend, "auto, mpi or nccl")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}))->capture_default_str();
  app.add_option("--data", opt.data,
                 "folder with the Fashion-MNIST IDX files, or 'synthetic' for generated data")
      ->capture_default_str();
  app.add_option("--epochs", opt.epochs, "passes over the training set")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch-size", opt.batch_size,
                 "samples per step on each rank (the global batch is this times the ranks)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--schedule", opt.schedule,
                 "learning rate per epoch: cosine (from --lr down towards 0) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))->capture_default_str();
  app.add_option("--lr", opt.lr, "learning rate")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--momentum", opt.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--weight-decay", opt.weight_decay, "SGD weight decay (L2)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--seed", opt.seed, "seed of the initial weights and the shuffling")
      ->capture_default_str();
  app.add_option("--train-samples", opt.train_samples,
                 "train on the first N training samples only (0: all), for quick runs")
      ->capture_default_str();
  app.add_option("--steps", opt.steps, "at most this many steps per epoch (0: whole epochs)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI::Option* cap = app.add_option("--bucket-cap-mb", opt.bucket_cap_mb,
                                    "cap of every bucket in MiB (not given: 25, and 1 for the first)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-set-epoch", opt.no_set_epoch,
               "do not call sampler.set_epoch(e) (a common pitfall: every epoch then repeats "
               "the first epoch's order)");
  app.add_flag("--find-unused-parameters", opt.find_unused,
               "mark parameters that got no gradient ready at the end of backward");
  app.add_flag("--no-distributed-sampler", opt.no_sampler,
               "every rank reads the whole training set in the same order (the classic "
               "mistake, to measure it)");
  app.add_flag("--no-broadcast-buffers", opt.no_broadcast_buffers,
               "do not copy rank 0's buffers (BatchNorm statistics) before each forward");
  app.add_option("--comm-hook", opt.comm_hook, "allreduce or fp16 (compress buckets to f16)")
      ->check(CLI::IsMember({"allreduce", "fp16"}))->capture_default_str();
  app.add_option("--metrics", opt.metrics, "rank 0 writes one JSON line per epoch here");
  app.add_option("--trace", opt.trace,
                 "write a Chrome trace (Perfetto) of every rank's phases and all-reduces here");
  // --help prints once, before MPI starts; a bad flag fails every rank the same way.
  CLI11_PARSE(app, argc, argv);
  opt.bucket_cap_given = cap->count() > 0;
  try {
    dist::Runtime runtime(&argc, &argv);
    try {
      return run(opt);
    } catch (const std::exception& e) {
      // Every rank usually fails the same way (the same checks on the same model); one that
      // fails alone must not leave the others waiting in a collective.
      dist::abort_job(std::string("error: ") + e.what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
