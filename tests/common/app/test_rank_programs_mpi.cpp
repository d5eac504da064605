// mgpu::app for the programs started with mpirun (run under mpirun with 2 and 3 ranks, and
// alone): init_ranks' groups, DdpStepTrace's spans of DDP steps, Checkpoints (a resumed run
// ends with the same weights as an uninterrupted one; another --seed or a recorded value
// is refused), and the weights' fingerprint across ranks.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"

using namespace mgpu;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// Step 0 of a program, once per process (the default group can be created only once).
const app::Ranks& ranks() {
  static const app::Ranks r = [] {
    app::Options opt;
    opt.backend = "mpi";
    return app::init_ranks(opt);
  }();
  return r;
}

/// A path every rank agrees on (rank 0's process id); rank 0 removes it (and what is in
/// it) at the end.
struct SharedPath {
  std::string path;
  explicit SharedPath(const std::string& name) {
    Tensor pid = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(getpid())}, {1});
    ranks().cpu_group->broadcast(pid, 0).wait();
    path = (fs::temp_directory_path() /
            ("mgpu-rank-programs-" + std::to_string(pid.to_vector<std::int64_t>()[0]) + "-" + name))
               .string();
  }
  ~SharedPath() {
    ranks().cpu_group->barrier().wait();
    if (dist::rank() == 0) fs::remove_all(path);
  }
};

/// 24 synthetic images of 1x4x4 in 3 classes, for training and testing.
app::Data small_data() {
  app::Data d;
  d.train = std::make_shared<data::SyntheticDataset>(24, Shape{1, 4, 4}, 3, 1);
  d.test = d.train;
  d.train_samples = 24;
  return d;
}

/// A two-epoch run of batches of 4 on small_data().
app::Options two_epochs() {
  app::Options opt;
  opt.data = "synthetic";
  opt.epochs = 2;
  opt.batch_size = 4;
  opt.lr = 0.1;
  opt.seed = 5;
  return opt;
}

/// A model of one weight matrix: DDP's bucket is the same before and after its rebuild, so
/// the all-reduce adds the same elements in the same order in a resumed run (with other
/// layouts the sums of 3 or more ranks may round differently).
std::shared_ptr<nn::Sequential> one_layer_model() {
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Flatten>());
  m->add(std::make_shared<nn::Linear>(16, 3, /*bias=*/false));
  return m;
}

/// Trains one_layer_model() under DDP with checkpoints `ck` (io's own hooks), as lessons 07
/// and 08 do; "precision" is recorded as `precision`. Returns the weights' fingerprint.
std::uint64_t train_with_checkpoints(const app::Options& opt, const app::CheckpointFlags& ck,
                                     const std::string& precision = "fp32") {
  const app::Ranks& r = ranks();
  app::Run run(opt, "checkpoint test", r);
  const app::Data d = small_data();
  auto sampler = std::make_shared<parallel::DistributedSampler>(d.train_samples, r.world, r.rank,
                                                                true, opt.seed);
  auto loader = app::train_loader(d, opt, r.device, false, sampler);
  nn::manual_seed(opt.seed);
  auto model = one_layer_model();
  parallel::DistributedDataParallel ddp(model, *r.group);
  optim::SGD sgd(ddp.parameters(), {opt.lr, 0.9, 0.0});
  nn::CrossEntropyLoss loss_fn;
  app::CheckpointHooks hooks;
  hooks.capture = [&](const io::TrainingProgress& p) { return io::capture_training_state(*model, sgd, p); };
  hooks.restore = [&](const io::TrainingState& st, const std::string& path) {
    return io::restore_training_state(st, *model, sgd, path);
  };
  app::Checkpoints checkpoints(ck, opt, d, run, *r.cpu_group, hooks);
  checkpoints.record("precision", precision, "--precision");
  checkpoints.resume();
  for (int epoch = checkpoints.first_epoch(); epoch < opt.epochs; ++epoch) {
    const double lr = app::learning_rate(opt, epoch);
    sgd.set_lr(lr);
    sampler->set_epoch(epoch);
    checkpoints.start_epoch(epoch, lr, *loader);
    data::Batch batch;
    while (run.next_batch(batch)) {
      sgd.zero_grad();
      const Tensor logits = ddp.forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      ddp.backward(loss_fn.backward());
      sgd.step();
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
      checkpoints.step_done(epoch);
    }
    run.end_training();
    run.end_epoch({0.5, 0.5, 24});
    checkpoints.epoch_done(epoch);
  }
  run.finish();
  return io::fingerprint(io::module_state_dict(*model));
}

}  // namespace

TEST_CASE("init_ranks: this rank's device, the default group, a CPU group over the world",
          "[app][ranks]") {
  const app::Ranks& r = ranks();
  CHECK(r.rank == dist::rank());
  CHECK(r.world == dist::world_size());
  CHECK(r.device == Device::cpu());
  REQUIRE(r.group != nullptr);
  CHECK(r.group == &dist::default_group());
  CHECK(r.group->size() == r.world);
  REQUIRE(r.cpu_group != nullptr);
  CHECK(r.cpu_group->size() == r.world);
  CHECK(r.cpu_group->rank() == r.rank);
  CHECK(r.cpu_group->device() == Device::cpu());
}

TEST_CASE("DdpStepTrace: DDP's phases on the compute track, each bucket's all-reduce on comm",
          "[app][trace]") {
  const app::Ranks& r = ranks();
  SharedPath file("ddp_trace.json");
  app::Trace trace;
  trace.open(file.path, app::now_s());
  nn::manual_seed(3);
  auto model = nn::make_model("mlp", {1, 4, 4}, 3);
  parallel::DistributedDataParallel ddp(model, *r.group);
  optim::SGD sgd(ddp.parameters(), {0.1, 0.0, 0.0});
  app::TracedOptimizer traced_sgd(sgd, trace, r.device);
  nn::CrossEntropyLoss loss_fn;
  const Tensor x = Tensor::full({4, 1, 4, 4}, 0.5);
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 1, 2, 0}, {4});
  {
    app::DdpStepTrace ddp_trace(trace, ddp);
    for (int step = 0; step < 2; ++step) {  // the second step's forward rebuilds the buckets
      sgd.zero_grad();
      loss_fn.forward(ddp.forward(x), y);
      ddp.backward(loss_fn.backward());
      traced_sgd.step();
      const std::vector<parallel::CommRecord> buckets = ddp_trace.record();
      REQUIRE(buckets.size() == 1);  // the MLP's 0.1 MiB fit in one bucket
      CHECK(buckets[0].done_s >= buckets[0].launch_s);
    }
  }
  {  // off: no timer, nothing recorded, unless the program asks for the timings
    app::Trace off;
    app::DdpStepTrace untimed(off, ddp), timed(off, ddp, /*time_buckets=*/true);
    sgd.zero_grad();
    loss_fn.forward(ddp.forward(x), y);
    ddp.backward(loss_fn.backward());
    CHECK(timed.record().size() == 1);
    CHECK(untimed.record().empty());
    CHECK(off.size() == 0);
  }
  trace.write(r.cpu_group.get());
  if (r.rank != 0) return;
  std::ifstream in(file.path);
  const json doc = json::parse(in);
  std::map<std::string, std::string> track_of;  // "pid/tid" -> track name
  for (const json& e : doc["traceEvents"])
    if (e["name"] == "thread_name")
      track_of[std::to_string(e["pid"].get<int>()) + "/" + std::to_string(e["tid"].get<int>())] =
          e["args"]["name"];
  std::multiset<std::string> on_rank0;  // "track: name"
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != 0) continue;
    const std::string track = track_of["0/" + std::to_string(e["tid"].get<int>())];
    std::string name = e["name"];
    if (name.rfind("all-reduce bucket 0:", 0) == 0) {
      CHECK(e["args"]["parameters"] == 6);
      CHECK(e["args"]["bytes"].get<double>() > 0);
      CHECK_THAT(name, Catch::EndsWith(" +3"));  // three parameters named, three more
      name = "all-reduce bucket 0";
    }
    on_rank0.insert(track + ": " + name);
  }
  CHECK(on_rank0 == std::multiset<std::string>{
                        "compute: forward", "compute: forward (buckets rebuilt)",
                        "compute: backward", "compute: backward", "compute: wait for buckets",
                        "compute: wait for buckets", "compute: optimizer", "compute: optimizer",
                        "comm: all-reduce bucket 0", "comm: all-reduce bucket 0"});
}

TEST_CASE("Checkpoints: a run resumed mid-epoch ends with the weights of an uninterrupted one",
          "[app][checkpoints]") {
  SharedPath dir("checkpoints");
  const app::Options opt = two_epochs();
  // 24 samples, batches of 4 on each of W ranks: at least 2 steps per epoch, 4 in the run.
  app::CheckpointFlags ck;
  ck.dir = dir.path;
  ck.save_every = 3;
  ck.keep_last = 0;
  const std::uint64_t uninterrupted = train_with_checkpoints(opt, ck);
  const std::string step3 = dir.path + "/" + io::checkpoint_name(3);
  REQUIRE(fs::exists(step3));

  app::CheckpointFlags resume = ck;
  resume.dir.clear();  // no further saves
  resume.resume = step3;
  CHECK(train_with_checkpoints(opt, resume) == uninterrupted);

  // Another run's checkpoint is refused, naming the flag that differs.
  app::Options other_seed = opt;
  other_seed.seed = 6;
  CHECK_THROWS_WITH(train_with_checkpoints(other_seed, resume),
                    Catch::Contains("--seed 5; resume with the same --seed"));
  CHECK_THROWS_WITH(train_with_checkpoints(opt, resume, "fp16"),
                    Catch::Contains("was trained with --precision fp32; resume with the same --precision"));

  // --resume auto in an empty folder starts from scratch; --save-every 0 saves every epoch.
  SharedPath fresh("fresh");
  app::CheckpointFlags per_epoch;
  per_epoch.dir = fresh.path;
  per_epoch.resume = "auto";
  CHECK(train_with_checkpoints(opt, per_epoch) == uninterrupted);
  CHECK(io::list_checkpoints(fresh.path).size() == 2);
}

TEST_CASE("log_weights_fingerprint: every rank's weights compared with rank 0's",
          "[app][checkpoints]") {
  const app::Ranks& r = ranks();
  nn::manual_seed(7);
  auto same = nn::make_model("mlp", {1, 4, 4}, 3);
  CHECK(app::log_weights_fingerprint(*same, r.cpu_group.get()) == 0);
  CHECK(app::log_weights_fingerprint(*same) == 0);  // no group: no comparison
  nn::manual_seed(7 + static_cast<std::uint64_t>(r.rank));  // rank r's own weights
  auto differ = nn::make_model("mlp", {1, 4, 4}, 3);
  CHECK(app::log_weights_fingerprint(*differ, r.cpu_group.get()) == r.world - 1);
}
