// mgpu::app for the programs started with mpirun, alone: their flags (--device help that
// says how ranks bind GPUs, --betas for AdamW instead of --momentum), the batch line,
// sizes in MiB.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/app/app.h"

using namespace mgpu;

namespace {

/// The --help text of a program declared with `flags`.
std::string help_of(const app::FlagSet& flags) {
  app::Options opt;
  CLI::App cli;
  app::add_flags(cli, opt, flags);
  return cli.help();
}

/// Parses `args` (without the program name) with the shared flags of `flags`.
app::Options parse(std::vector<std::string> args, const app::FlagSet& flags) {
  app::Options opt;
  CLI::App cli;
  app::add_flags(cli, opt, flags);
  std::reverse(args.begin(), args.end());  // CLI11 reads a reversed vector
  cli.parse(args);
  return opt;
}

}  // namespace

TEST_CASE("--device help says how ranks bind GPUs where the program runs under mpirun",
          "[app][flags]") {
  app::FlagSet single, ranks;
  ranks.backend = true;
  CHECK_THAT(help_of(single), Catch::Contains("cpu, cpu:N, cuda or cuda:N"));
  CHECK_THAT(help_of(ranks), Catch::Contains("cuda (rank r uses cuda:<local rank>)"));
  CHECK_THAT(help_of(ranks), Catch::Contains("--backend"));
  app::FlagSet own = ranks;
  own.device_help = "one device per stage";
  CHECK_THAT(help_of(own), Catch::Contains("one device per stage"));
  CHECK_THAT(help_of(own), !Catch::Contains("local rank"));
  // The default models: the five that train alike on one device or many.
  for (const char* m : {"mlp", "cnn", "mlp-bn", "deep-mlp", "cnn-small"})
    CHECK(parse({"--model", m}, single).model == m);
  CHECK_THROWS_AS(parse({"--model", "wide-mlp"}, single), CLI::ValidationError);
}

TEST_CASE("AdamW programs take --betas, not SGD's --momentum", "[app][flags]") {
  app::FlagSet adamw;
  adamw.adamw = true;
  const std::string help = help_of(adamw);
  CHECK_THAT(help, Catch::Contains("--betas"));
  CHECK_THAT(help, Catch::Contains("0.9 0.999"));
  CHECK_THAT(help, Catch::Contains("AdamW weight decay (decoupled"));
  CHECK_THAT(help, !Catch::Contains("--momentum"));
  CHECK_THAT(help, !Catch::Contains("SGD"));
  const app::Options opt = parse({"--betas", "0.8", "0.99", "--weight-decay", "0.1"}, adamw);
  CHECK(opt.betas.first == 0.8);
  CHECK(opt.betas.second == 0.99);
  CHECK(opt.weight_decay == 0.1);
  CHECK(parse({}, adamw).betas == std::pair<double, double>{0.9, 0.999});  // PyTorch's
  try {
    parse({"--betas", "0.9", "1"}, adamw);
    FAIL("--betas 0.9 1 was accepted");
  } catch (const CLI::ValidationError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("must be a number from 0 to below 1, got '1'"));
  }
  CHECK_THROWS_AS(parse({"--momentum", "0.5"}, adamw), CLI::ParseError);  // not declared
  CHECK_THROWS_AS(parse({"--betas", "0.9"}, adamw), CLI::ParseError);     // two values
  app::FlagSet sgd;
  CHECK_THAT(help_of(sgd), Catch::Contains("--momentum"));
  CHECK_THAT(help_of(sgd), !Catch::Contains("--betas"));
}

TEST_CASE("real_below: at least low, below high", "[app][flags]") {
  const CLI::Validator v = app::real_below(0, 1);
  std::string text = "0";
  CHECK(v(text).empty());
  text = "0.999";
  CHECK(v(text).empty());
  text = "1";
  CHECK(v(text) == "must be a number from 0 to below 1, got '1'");
  text = "-0.5";
  CHECK(v(text) == "must be a number from 0 to below 1, got '-0.5'");
  text = "nan";
  CHECK_FALSE(v(text).empty());
}

TEST_CASE("batch_line: per rank and global, or per replica of tensor-parallel ranks",
          "[app][report]") {
  CHECK(app::batch_line(64, 2, 2, 30000, 469) ==
        "batch: 64 per rank, global 128 (2 rank(s)); 30000 samples and 469 steps per rank per epoch");
  CHECK(app::batch_line(16, 4, 4, 100, 7, "BatchNorm statistics over 64 samples") ==
        "batch: 16 per rank, global 64 (4 rank(s)); 100 samples and 7 steps per rank per epoch; "
        "BatchNorm statistics over 64 samples");
  // 4 ranks as tp 2 x dp 2: two replicas of two ranks each.
  CHECK(app::batch_line(64, 2, 4, 30000, 469) ==
        "batch: 64 per replica, global 128 (2 data-parallel replica(s); the 2 ranks of a "
        "replica read the same batch); 30000 samples and 469 steps per replica per epoch");
}

TEST_CASE("mib: bytes in MiB with the decimals asked for", "[app][report]") {
  CHECK(app::mib(1024.0 * 1024.0) == "1.00 MiB");
  CHECK(app::mib(1.5 * 1024 * 1024, 3) == "1.500 MiB");
  CHECK(app::mib(0) == "0.00 MiB");
  CHECK(app::mib(3 * 1024.0 * 1024.0 * 1024.0, 0) == "3072 MiB");
}
