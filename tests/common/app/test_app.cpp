// mgpu::app, the programs' shared module: flags and their messages, the learning rate
// schedule, the epoch/final lines, the metrics file, the trace, evaluation, the data
// checks, a whole Run, and the model catalogue.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "mgpu/app/app.h"
#include "mgpu/app/gpt_program.h"
#include "mgpu/app/gpt_resume.h"
#include "mgpu/parallel/grid/grid.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "temp_dir.h"

using namespace mgpu;
namespace fs = std::filesystem;
using nlohmann::json;

using mgpu::testing::TempDir;

namespace {

/// The message a validator gives for `text` ("" when it accepts it).
std::string check(const CLI::Validator& v, std::string text) { return v(text); }

/// Parses `args` (without the program name) into a fresh Options with the shared flags.
app::Options parse(std::vector<std::string> args, bool lr_schedule = false) {
  app::Options opt;
  CLI::App cli;
  app::FlagSet flags;
  flags.models = {"mlp", "cnn"};
  flags.lr_schedule = lr_schedule;
  app::add_flags(cli, opt, flags);
  std::reverse(args.begin(), args.end());  // CLI11 reads a reversed vector
  cli.parse(args);
  return opt;
}

/// Each (flag, value) given alone to `parse` must be refused by its validator with a
/// message that starts with the flag and says what it must be (not a huge limit's digits).
template <class Parse>
void check_refused(Parse&& parse, const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [flag, value] : cases) {
    try {
      parse({flag, value});
      FAIL(flag << " " << value << " was accepted");
    } catch (const CLI::ValidationError& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::StartsWith(flag + ": must be"));
      CHECK_THAT(what, !Catch::Contains("179769"));
    }
  }
}

std::vector<json> read_json_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("flag validators say what is wrong in plain words", "[app][flags]") {
  const CLI::Validator positive = app::positive_integer();
  CHECK(check(positive, "3").empty());
  CHECK(check(positive, "0") == "must be a positive integer, got '0'");
  CHECK(check(positive, "-2") == "must be a positive integer, got '-2'");
  CHECK(check(positive, "2.5") == "must be a positive integer, got '2.5'");
  CHECK(check(positive, "x") == "must be a positive integer, got 'x'");
  CHECK(check(positive, "99999999999") == "must be at most 2147483647, got '99999999999'");
  CHECK(check(app::non_negative_integer(), "0").empty());
  CHECK(check(app::non_negative_integer(), "-1") == "must be 0 or a positive integer, got '-1'");
  CHECK(check(app::non_negative_real(), "0.5").empty());
  CHECK(check(app::non_negative_real(), "-0.1") == "must be a number >= 0, got '-0.1'");
  CHECK(check(app::non_negative_real(), "inf") == "must be a number >= 0, got 'inf'");
  CHECK(check(app::real_in(0, 1), "1").empty());
  CHECK(check(app::real_in(0, 1), "1.5") == "must be a number from 0 to 1, got '1.5'");
}

TEST_CASE("add_flags declares the shared flags; bad values never print DBL_MAX",
          "[app][flags]") {
  const app::Options opt = parse({"--epochs", "3", "--batch-size", "32", "--lr", "0.1",
                                  "--model", "cnn", "--seed", "7", "--steps", "5",
                                  "--train-samples", "100", "--metrics", "m.jsonl"});
  CHECK(opt.epochs == 3);
  CHECK(opt.batch_size == 32);
  CHECK(opt.lr == 0.1);
  CHECK(opt.model == "cnn");
  CHECK(opt.seed == 7);
  CHECK(opt.steps == 5);
  CHECK(opt.train_samples == 100);
  CHECK(opt.metrics == "m.jsonl");
  CHECK(opt.data == data::FashionMNIST::kDefaultDir);  // the default
  check_refused([](std::vector<std::string> args) { return parse(args); },
                {{"--epochs", "0"}, {"--batch-size", "-1"}, {"--lr", "-1"}, {"--steps", "-3"}});
  CHECK_THROWS_AS(parse({"--model", "resnet"}), CLI::ValidationError);
  CHECK_THROWS_AS(parse({"--schedule", "cosine"}), CLI::ParseError);  // not declared
  CHECK(parse({"--schedule", "cosine"}, true).schedule == "cosine");
}

TEST_CASE("the GPT programs' shared flags refuse what lesson 01's refuse, naming the flag",
          "[app][flags]") {
  const auto parse_gpt = [](std::vector<std::string> args) {
    app::GptProgramFlags f;
    CLI::App cli;
    app::add_gpt_program_flags(cli, f, "windows", "tokens");
    std::reverse(args.begin(), args.end());
    cli.parse(args);
    return f;
  };
  CHECK(parse_gpt({"--steps", "3", "--seed", "7", "--batch-size", "8"}).steps == 3);
  check_refused(parse_gpt, {{"--steps", "0"}, {"--steps", "-1"}, {"--seed", "-1"},
                            {"--batch-size", "1e8"}, {"--batch-size", "100000000"},
                            {"--seq", "0"}, {"--lr", "-0.1"}, {"--lr", "nan"}});
}

TEST_CASE("check_grid: extents below 1 or whose product overflows an int are named as such",
          "[app][flags]") {
  namespace grid = mgpu::parallel::grid;
  CHECK_NOTHROW(grid::check_grid(grid::GridShape{2, 2, 1}, 4));
  CHECK_THROWS_WITH(grid::check_grid(grid::GridShape{0, 1, 1}, 1),
                    Catch::Contains("every extent must be at least 1"));
  CHECK_THROWS_WITH(grid::check_grid(grid::GridShape{-2, 1, 1}, 1),
                    Catch::Contains("every extent must be at least 1"));
  CHECK_THROWS_WITH(grid::check_grid(grid::GridShape{65536, 65536, 1}, 1),
                    Catch::Contains("holds more than 2147483647 rank(s)") && !Catch::Contains("-np 0"));
  CHECK_THROWS_WITH(grid::check_grid(grid::GridShape{2, 1, 1}, 1), Catch::Contains("tools/mpirun -np 2"));
}

TEST_CASE("a GPT program's resume: metadata checked against the flags, naming key and flag; "
          "no save into the folder it loads", "[app][flags]") {
  app::GptProgramFlags f;
  const io::Metadata saved = app::gpt_checkpoint_metadata(f, 5, "DP 2 x TP 1 x PP 1");
  const app::GptResume r = app::gpt_resume_checks(saved, f, "ck");
  CHECK(r.step == 5);
  CHECK(r.layout == "DP 2 x TP 1 x PP 1");
  CHECK(r.note.empty());
  const auto refusal = [&](io::Metadata m, const app::GptProgramFlags& flags) {
    try {
      app::gpt_resume_checks(m, flags, "ck");
    } catch (const mgpu::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  app::GptProgramFlags other = f;
  other.seed = 7;
  CHECK_THAT(refusal(saved, other), Catch::Contains("resume with --seed 1337"));
  other = f;
  other.seq = 32;
  CHECK_THAT(refusal(saved, other), Catch::Contains("resume with --seq 64"));
  other = f;
  other.batch = 8;
  CHECK_THAT(refusal(saved, other), Catch::Contains("resume with --batch-size 4"));
  io::Metadata m = saved;
  m.erase("step");
  CHECK_THAT(refusal(m, f), Catch::Contains("ck: the checkpoint's metadata has no \"step\""));
  m = saved;
  m["batch_size"] = "4x";
  CHECK_THAT(refusal(m, f), Catch::Contains("\"batch_size\" is '4x', not a count"));
  m = saved;
  m["step"] = "99999999999999999999";  // would overflow std::stoll
  CHECK_THAT(refusal(m, f), Catch::Contains("not a count"));
  m = saved;
  m.erase("seed");
  CHECK_THAT(app::gpt_resume_checks(m, f, "ck").note, Catch::Contains("--seed"));
  CHECK_THAT(app::gpt_resume_checks(saved, f, "ck", 3).note, Catch::Contains("3 chunk(s) were not verified"));
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THROWS_WITH(app::check_save_folder(dir + "/", dir), Catch::Contains("is the folder --load reads"));
  CHECK_NOTHROW(app::check_save_folder(dir + "/new-folder", dir));
  CHECK_NOTHROW(app::check_save_folder("", dir));
}

TEST_CASE("learning_rate: constant, or a half cosine from lr towards 0", "[app][flags]") {
  app::Options opt;
  opt.lr = 0.1;
  opt.epochs = 4;
  CHECK(app::learning_rate(opt, 3) == 0.1);
  opt.schedule = "cosine";
  CHECK(app::learning_rate(opt, 0) == 0.1);
  CHECK(app::learning_rate(opt, 2) == Approx(0.05));
  CHECK(app::learning_rate(opt, 3) == Approx(0.1 * 0.5 * (1 + std::cos(3.14159265358979 * 0.75))));
  CHECK(app::learning_rate(opt, 3) > 0);
}

TEST_CASE("the epoch line and the final line", "[app][report]") {
  app::EpochStats s;
  s.epoch = 2;
  s.epochs = 10;
  s.lr = 0.01;
  s.train_loss = 0.5;
  s.train_acc = 0.8125;
  s.test_loss = 0.25;
  s.test_acc = 0.875;
  s.samples_per_s = 1234.4;
  s.step_ms = 1.5;
  s.world_size = 2;
  s.time_s = 3.25;
  CHECK(app::epoch_line(s) ==
        "epoch 2/10: lr=0.01 train_loss=0.5000 train_acc=0.8125 test_loss=0.2500 "
        "test_acc=0.8750 samples_per_s=1234 step_ms=1.50 data_wait_s=0.00 world_size=2 time_s=3.2");
  s.has_train_acc = false;
  CHECK_THAT(app::epoch_line(s), !Catch::Contains("train_acc"));
  CHECK(app::final_line(0.875, 0.5, 1234.4, 3.25) ==
        "final: test_acc=0.8750 train_loss=0.5000 samples_per_s=1234 time_s=3.2");
}

TEST_CASE("MetricsWriter: every field of DESIGN §8, one flushed line per epoch", "[app][report]") {
  TempDir dir;
  app::MetricsWriter bad;
  CHECK_THROWS_WITH(bad.open(dir.file("no/such/folder/m.jsonl")),
                    Catch::Contains("--metrics: cannot write") && Catch::Contains("m.jsonl"));
  app::MetricsWriter m;
  m.open(dir.file("m.jsonl"));
  app::EpochStats s;
  s.epoch = 1;
  s.train_acc = 0.5;
  s.world_size = 3;
  s.global_batch = 192;
  m.write(s, {{"stages", 2}, {"ratio", 0.25}});
  s.epoch = 2;
  s.has_train_acc = false;
  m.write(s);
  const std::vector<json> lines = read_json_lines(dir.file("m.jsonl"));  // before close: flushed
  REQUIRE(lines.size() == 2);
  for (const char* key : {"epoch", "train_loss", "train_acc", "test_loss", "test_acc",
                          "samples_per_s", "step_ms", "world_size"})
    CHECK(lines[0].contains(key));
  CHECK(lines[0]["world_size"] == 3);
  CHECK(lines[0]["global_batch"] == 192);
  CHECK(lines[0]["stages"].is_number_integer());
  CHECK(lines[0]["ratio"] == 0.25);
  CHECK(lines[1]["epoch"] == 2);
  CHECK_FALSE(lines[1].contains("train_acc"));
}

TEST_CASE("Trace: spans per track, written as a Chrome trace", "[app][trace]") {
  TempDir dir;
  app::Trace off;
  off.span("compute", "forward", 0, 1);
  CHECK(off.size() == 0);
  CHECK_FALSE(off.on());
  off.write();  // nothing, no file
  app::Trace bad;
  CHECK_THROWS_WITH(bad.open(dir.file("missing/t.json"), 0), Catch::Contains("--trace: cannot write"));

  app::Trace trace;
  trace.open(dir.file("t.json"), 100.0);
  CHECK_FALSE(fs::exists(dir.file("t.json")));  // checked writable; written by write(), atomically
  trace.name_process("my program");
  trace.declare_tracks({"compute", "comm"});
  trace.span("comm", "all-reduce bucket 0", 100.5, 100.75, {{"bytes", 4096}});
  trace.span("compute", "forward", 100.25, 100.5);
  trace.span("compute", "backwards in time", 101, 100);  // ignored
  // Threads may record at once (a communication thread beside the step loop).
  std::thread other([&] {
    for (int i = 0; i < 500; ++i) trace.span("worker", "w", 100 + i * 1e-3, 100 + i * 1e-3);
  });
  for (int i = 0; i < 500; ++i) trace.span("compute", "c", 100, 100);
  other.join();
  CHECK(trace.size() == 1002);
  trace.write();

  std::ifstream in(dir.file("t.json"));
  const json doc = json::parse(in);
  std::map<int, std::string> track_names;
  std::string process;
  const json* forward = nullptr;
  const json* bucket = nullptr;
  for (const json& e : doc["traceEvents"]) {
    CHECK(e["pid"] == 0);
    if (e["name"] == "thread_name") track_names[e["tid"].get<int>()] = e["args"]["name"];
    if (e["name"] == "process_name") process = e["args"]["name"];
    if (e["name"] == "forward") forward = &e;
    if (e["name"] == "all-reduce bucket 0") bucket = &e;
  }
  CHECK(process == "my program");
  CHECK(track_names == std::map<int, std::string>{{0, "compute"}, {1, "comm"}, {2, "worker"}});
  REQUIRE(forward != nullptr);
  REQUIRE(bucket != nullptr);
  CHECK((*forward)["ph"] == "X");
  CHECK((*forward)["tid"] == 0);
  CHECK((*forward)["ts"].get<double>() == Approx(250000));  // microseconds after the origin
  CHECK((*forward)["dur"].get<double>() == Approx(250000));
  CHECK((*bucket)["tid"] == 1);
  CHECK((*bucket)["args"]["bytes"] == 4096);

  // A program that stops early (an exception) still leaves a valid trace of what it did.
  {
    app::Trace early;
    early.open(dir.file("early.json"), 0);
    early.span("compute", "forward", 1, 2);
  }
  std::ifstream early_in(dir.file("early.json"));
  const json early_doc = json::parse(early_in);
  int spans = 0;
  for (const json& e : early_doc["traceEvents"]) spans += e["ph"] == "X";
  CHECK(spans == 1);
}

TEST_CASE("count_correct and evaluate", "[app][evaluate]") {
  const Tensor logits = Tensor::from_vector(std::vector<float>{1, 2, 3, 0, 5, 1}, {3, 2});
  CHECK(app::count_correct(logits, Tensor::from_vector(std::vector<std::int64_t>{1, 0, 1}, {3})) == 2);
  CHECK_THROWS_WITH(app::count_correct(logits, Tensor::from_vector(std::vector<std::int64_t>{1}, {1})),
                    Catch::Contains("do not match"));

  // evaluate = the weighted mean of each batch's loss, and the fraction classified right,
  // in evaluation mode; the model is back in training mode afterwards.
  auto ds = std::make_shared<data::SyntheticDataset>(50, Shape{6}, 3, 4);
  data::DataLoaderOptions o;
  o.batch_size = 16;  // 16, 16, 16, 2
  o.shuffle = false;
  data::DataLoader loader(ds, o);
  nn::manual_seed(1);
  nn::Linear model(6, 3);
  const app::EvalResult r = app::evaluate(model, loader);
  CHECK(model.is_training());
  Tensor x, y;
  data::load_range(*ds, 0, 50, x, y);
  model.eval();
  const Tensor all = model.forward(x);
  nn::CrossEntropyLoss loss;
  CHECK(r.samples == 50);
  CHECK(r.accuracy == Approx(static_cast<double>(app::count_correct(all, y)) / 50));
  CHECK(r.loss == Approx(loss.forward(all, y).item()).epsilon(1e-5));
}

TEST_CASE("open_data refuses what would train nothing; loaders clamp huge batches", "[app][data]") {
  app::Options opt;
  opt.data = "synthetic";
  opt.train_samples = 60001;
  CHECK_THROWS_WITH(app::open_data(opt), Catch::Contains("--train-samples 60001 is not in [0, 60000]"));
  opt.train_samples = 100;
  const app::Data d = app::open_data(opt);
  CHECK(d.train_samples == 100);
  opt.batch_size = 2000000000;  // far more than the data: costs the data's memory only
  auto loader = app::train_loader(d, opt, Device::cpu());
  CHECK(loader->num_batches() == 1);
  loader->start_epoch(0);
  data::Batch b;
  REQUIRE(loader->next(b));
  CHECK(b.inputs.size(0) == 100);
  opt.data = "/nonexistent/folder";
  CHECK_THROWS_WITH(app::open_data(opt), Catch::Contains("--data synthetic"));
}

TEST_CASE("Run: epochs of metrics, a trace with the loop's spans, no batch is an error",
          "[app][run]") {
  TempDir dir;
  app::Options opt;
  opt.data = "synthetic";
  opt.train_samples = 96;
  opt.batch_size = 32;
  opt.epochs = 2;
  opt.steps = 2;
  opt.metrics = dir.file("m.jsonl");
  opt.trace = dir.file("t.json");
  app::Run run(opt, "test run", {Device::cpu()});
  run.add_metric_fields({{"devices", 1}});
  const app::Data d = app::open_data(opt);
  auto loader = app::train_loader(d, opt, Device::cpu());
  auto test_loader = app::test_loader(d, Device::cpu(), 1000);
  nn::manual_seed(0);
  auto model = nn::make_model("mlp", d.train->sample_shape());
  optim::SGD optimizer(model->parameters(), {opt.lr, opt.momentum, 0.0});
  nn::CrossEntropyLoss loss_fn;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    loader->start_epoch(epoch);
    run.start_epoch(epoch, opt.lr, *loader);
    CHECK(run.planned_steps() == 2);  // --steps 2 of 3 batches
    data::Batch batch;
    while (run.next_batch(batch)) {
      optimizer.zero_grad();
      const Tensor logits = model->forward(batch.inputs);
      const double loss = loss_fn.forward(logits, batch.labels).item();
      model->backward(loss_fn.backward());
      optimizer.step();
      run.step(loss, batch.labels.numel(), app::count_correct(logits, batch.labels));
    }
    CHECK(run.epoch_steps() == 2);
    run.end_training();
    run.end_epoch(app::evaluate(*model, *test_loader));
  }
  CHECK(run.steps_done() == 4);
  CHECK(run.finish() == 0);
  const std::vector<json> lines = read_json_lines(dir.file("m.jsonl"));
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["epoch"] == 2);
  CHECK(lines[1]["devices"] == 1);
  CHECK(lines[1]["global_batch"] == 32);
  CHECK(lines[1]["test_acc"].get<double>() > 0.2);  // synthetic data is easy
  std::ifstream in(dir.file("t.json"));
  const json doc = json::parse(in);
  std::multiset<std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  CHECK(names.count("data wait") == 4);
  CHECK(names.count("evaluate") == 2);

  // A batch larger than the samples, with the last partial batch dropped: no step at all.
  opt.batch_size = 200;
  auto empty = app::train_loader(d, opt, Device::cpu(), /*drop_last=*/true);
  CHECK_THROWS_WITH(run.start_epoch(0, 0.1, *empty),
                    Catch::Contains("gives no batch") && Catch::Contains("--batch-size 200"));
}

TEST_CASE("the model catalogue: each name once, with its layers", "[app][models]") {
  std::set<std::string> names;
  for (const nn::ModelInfo& m : nn::model_catalog()) names.insert(m.name);
  CHECK(names == std::set<std::string>{"mlp", "mlp-bn", "deep-mlp", "cnn", "cnn-small", "wide-mlp"});
  // Parameter counts follow from the layers listed in models.h.
  CHECK(nn::make_model("mlp")->num_parameters() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  CHECK(nn::make_model("mlp-bn")->num_parameters() == nn::make_model("mlp")->num_parameters() + 2 * 256);
  CHECK(nn::make_model("deep-mlp")->num_parameters() == 864266);
  CHECK(nn::make_model("wide-mlp")->num_parameters() ==
        (784 * 1024 + 1024) + 8 * (1024 * 1024 + 1024) + (1024 * 10 + 10));
  CHECK(nn::make_model("cnn")->num_parameters() ==
        (9 * 32 + 32) + 2 * 32 + (9 * 32 * 64 + 64) + 2 * 64 + (3136 * 128 + 128) + (128 * 10 + 10));
  CHECK(nn::make_model("cnn-small")->num_parameters() ==
        (9 * 16 + 16) + 2 * 16 + (9 * 16 * 32 + 32) + 2 * 32 + (1568 * 10 + 10));
  CHECK(nn::make_model("mlp", {3, 8, 8}, 5)->num_parameters() == 192 * 256 + 256 + 256 * 128 + 128 + 128 * 5 + 5);
  // The same seed gives the same weights.
  nn::manual_seed(3);
  auto a = nn::make_model("cnn");
  nn::manual_seed(3);
  auto b = nn::make_model("cnn");
  CHECK(a->parameter("9.weight").value.to_vector<float>() == b->parameter("9.weight").value.to_vector<float>());
  CHECK_THROWS_WITH(nn::make_model("resnet"), Catch::Contains("choose one of mlp, mlp-bn"));
  CHECK_THROWS_WITH(nn::make_model("cnn", {1, 30, 30}), Catch::Contains("divisible by 4"));
}
