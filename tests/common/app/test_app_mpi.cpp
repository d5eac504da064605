// mgpu::app across ranks (run under mpirun with 2 and 3 ranks, and alone): the trace is
// gathered into one file on rank 0, evaluation and a Run's epoch numbers are summed over
// the ranks, the test set split across them counts every sample once.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "mgpu/app/app.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"

using namespace mgpu;
using nlohmann::json;

namespace {

dist::ProcessGroup& cpu_group() {
  static std::shared_ptr<dist::ProcessGroup> g = [] {
    dist::GroupOptions o;
    o.announce = false;
    return dist::new_group("mpi", Device::cpu(), o);
  }();
  return *g;
}

/// A file name every rank agrees on (rank 0's process id), removed by rank 0 at the end.
struct SharedPath {
  std::string path;
  explicit SharedPath(const std::string& name) {
    Tensor pid = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(getpid())}, {1});
    cpu_group().broadcast(pid, 0).wait();
    path = (std::filesystem::temp_directory_path() /
            ("mgpu-app-mpi-" + std::to_string(pid.to_vector<std::int64_t>()[0]) + "-" + name))
               .string();
  }
  ~SharedPath() {
    cpu_group().barrier().wait();
    if (dist::rank() == 0) std::filesystem::remove(path);
  }
};

/// A one-epoch run's options on synthetic data, batch 4, metrics to `metrics` if given.
app::Options one_epoch_options(const std::string& metrics = "") {
  app::Options opt;
  opt.data = "synthetic";
  opt.epochs = 1;
  opt.batch_size = 4;
  opt.metrics = metrics;
  return opt;
}

/// `samples` synthetic samples of shape {2}, 2 classes, used for training and testing.
app::Data synthetic_data(std::int64_t samples) {
  app::Data d;
  d.train = std::make_shared<data::SyntheticDataset>(samples, Shape{2}, 2, 1);
  d.test = d.train;
  d.train_samples = samples;
  return d;
}

/// Epoch 0 of `run` started over `samples` synthetic samples (lr 0.5), its first batch drawn.
struct FirstBatch {
  app::Data data;
  std::unique_ptr<data::DataLoader> loader;
  data::Batch batch;
  FirstBatch(app::Run& run, const app::Options& opt, std::int64_t samples)
      : data(synthetic_data(samples)), loader(app::train_loader(data, opt, Device::cpu())) {
    loader->start_epoch(0);
    run.start_epoch(0, 0.5, *loader);
    REQUIRE(run.next_batch(batch));
  }
};

}  // namespace

TEST_CASE("Trace::write gathers every rank's spans into one file on rank 0", "[app][trace]") {
  dist::ProcessGroup& g = cpu_group();
  SharedPath file("trace.json");
  app::Trace trace;
  trace.open(file.path, 10.0);
  for (int i = 0; i <= g.rank(); ++i)  // rank r records r + 1 spans
    trace.span("comm", "bucket " + std::to_string(i), 10.0 + i, 10.5 + i, {{"rank", g.rank()}});
  trace.write(&g);
  if (g.rank() != 0) return;
  std::ifstream in(file.path);
  const json doc = json::parse(in);
  std::vector<int> spans_per_rank(static_cast<std::size_t>(g.size()), 0);
  std::set<std::string> processes;
  for (const json& e : doc["traceEvents"]) {
    if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] != "X") continue;
    const int pid = e["pid"];
    CHECK(e["args"]["rank"] == pid);  // each rank's spans under its own process
    spans_per_rank[static_cast<std::size_t>(pid)]++;
  }
  for (int r = 0; r < g.size(); ++r) CHECK(spans_per_rank[static_cast<std::size_t>(r)] == r + 1);
  CHECK(processes.size() == static_cast<std::size_t>(g.size()));
}

TEST_CASE("evaluate over a split test set equals one rank evaluating all of it",
          "[app][evaluate]") {
  dist::ProcessGroup& g = cpu_group();
  app::Data d;
  d.train = std::make_shared<data::SyntheticDataset>(10, Shape{1, 4, 4}, 3, 5);
  d.test = std::make_shared<data::SyntheticDataset>(101, Shape{1, 4, 4}, 3, 5, data::Split::test);
  nn::manual_seed(2);
  auto model = nn::make_model("mlp", {1, 4, 4}, 3);
  auto split = app::test_loader(d, Device::cpu(), 7, &g);
  auto whole = app::test_loader(d, Device::cpu(), 101);
  const app::EvalResult summed = app::evaluate(*model, *split, &g);
  const app::EvalResult alone = app::evaluate(*model, *whole);
  CHECK(summed.samples == 101);
  CHECK(summed.accuracy == alone.accuracy);
  CHECK(summed.loss == Approx(alone.loss).epsilon(1e-6));
}

TEST_CASE("Run sums the epoch's training numbers over every rank", "[app][run]") {
  dist::ProcessGroup& g = cpu_group();
  SharedPath file("metrics.jsonl");
  const app::Options opt = one_epoch_options(file.path);
  app::Run run(opt, "test run", {Device::cpu()}, &g);
  const FirstBatch first(run, opt, 8);
  // Rank r reports one step of loss r + 1 over r + 1 samples, r of them right.
  const int r = g.rank();
  run.step(r + 1.0, r + 1, r);
  run.end_training();
  run.end_epoch({0.25, 0.5, 8});
  run.finish();
  g.barrier().wait();
  if (r != 0) return;
  std::ifstream in(file.path);
  std::string line;
  REQUIRE(std::getline(in, line));
  const json m = json::parse(line);
  double loss_sum = 0, correct = 0, samples = 0;
  for (int k = 0; k < g.size(); ++k) {
    loss_sum += (k + 1.0) * (k + 1.0);
    correct += k;
    samples += k + 1;
  }
  CHECK(m["train_loss"].get<double>() == Approx(loss_sum / samples));
  CHECK(m["train_acc"].get<double>() == Approx(correct / samples));
  CHECK(m["world_size"] == g.size());
  CHECK(m["global_batch"] == 4 * g.size());
  CHECK(m["lr"] == 0.5);
}

TEST_CASE("gather_epoch_sums: every rank's row, read back by epoch_sums_of", "[app][run]") {
  dist::ProcessGroup& g = cpu_group();
  const app::Options opt = one_epoch_options();
  app::Run run(opt, "test run", {Device::cpu()}, &g);
  const FirstBatch first(run, opt, 16);
  const int r = g.rank();
  run.step(r + 0.5, 4, r);  // rank r: loss r + 0.5 over 4 samples, r right
  const Tensor rows = run.gather_epoch_sums(g);
  REQUIRE(rows.shape() == Shape{g.size(), 4});
  for (int k = 0; k < g.size(); ++k) {
    const app::Run::EpochSums s = app::Run::epoch_sums_of(rows, k);
    CHECK(s.steps == 1);
    CHECK(s.loss_sum == (k + 0.5) * 4);
    CHECK(s.correct == k);
    CHECK(s.seen == 4);
  }
  CHECK_THROWS_WITH(app::Run::epoch_sums_of(rows, g.size()), Catch::Contains("a row for rank"));
  run.end_training();
  run.end_epoch({0.25, 0.5, 16});
  run.finish();
}
