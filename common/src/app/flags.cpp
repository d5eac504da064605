// The shared flags (see flags.h).
#include "mgpu/app/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <vector>

#include "mgpu/data/dataset.h"
#include "mgpu/nn/models.h"

namespace mgpu::app {

Options::Options() : data(data::FashionMNIST::kDefaultDir) {}

namespace {

// Whole text as an integer (no sign games, no trailing junk, no overflow).
bool parse_integer(const std::string& text, long long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && end == text.c_str() + text.size();
}

bool parse_real(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(value);
}

CLI::Validator integer_in(long long low, long long high, const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        long long v = 0;
        const bool integer = parse_integer(text, v);
        if (integer && v >= low && v <= high) return "";
        std::ostringstream os;
        if (integer && v > high) os << "must be at most " << high;
        else os << "must be " << what;
        os << ", got '" << text << "'";
        return os.str();
      },
      what == "a positive integer" ? "INT>0" : "INT>=0");
}

// A real number that `ok` accepts; otherwise "must be <must>, got '<text>'".
CLI::Validator real_check(std::function<bool(double)> ok, const std::string& must,
                          const std::string& description) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (parse_real(text, v) && ok(v)) return "";
        return "must be " + must + ", got '" + text + "'";
      },
      description);
}

}  // namespace

CLI::Validator positive_integer(std::int64_t max) { return integer_in(1, max, "a positive integer"); }

CLI::Validator non_negative_integer(std::int64_t max) {
  return integer_in(0, max, "0 or a positive integer");
}

CLI::Validator real_in(double low, double high) {
  std::ostringstream must;
  must << "a number from " << low << " to " << high;
  return real_check([=](double v) { return v >= low && v <= high; }, must.str(),
                    "NUM in [" + CLI::detail::to_string(low) + ", " + CLI::detail::to_string(high) + "]");
}

CLI::Validator real_below(double low, double high) {
  std::ostringstream must;
  must << "a number from " << low << " to below " << high;
  return real_check([=](double v) { return v >= low && v < high; }, must.str(),
                    "NUM in [" + CLI::detail::to_string(low) + ", " + CLI::detail::to_string(high) + ")");
}

CLI::Validator non_negative_real() {
  return real_check([](double v) { return v >= 0; }, "a number >= 0", "NUM>=0");
}

CLI::Validator positive_real() {
  return real_check([](double v) { return v > 0; }, "a number > 0", "NUM>0");
}

void add_flags(CLI::App& cli, Options& opt, const FlagSet& which) {
  std::string models;
  for (const std::string& m : which.models) models += "\n  " + m + ": " + nn::model_summary(m);
  cli.add_option("--data", opt.data,
                 "folder with the Fashion-MNIST IDX files, or 'synthetic' for generated data")
      ->capture_default_str();
  cli.add_option("--model", opt.model, "the model:" + models)
      ->check(CLI::IsMember(which.models))->capture_default_str();
  cli.add_option("--epochs", opt.epochs, "passes over the training set")
      ->check(positive_integer())->capture_default_str();
  cli.add_option("--batch-size", opt.batch_size, which.batch_help)
      ->check(positive_integer())->capture_default_str();
  cli.add_option("--lr", opt.lr, "learning rate")->check(non_negative_real())->capture_default_str();
  if (which.lr_schedule)
    cli.add_option("--schedule", opt.schedule,
                   "learning rate per epoch: cosine (from --lr down towards 0) or constant")
        ->check(CLI::IsMember({"cosine", "constant"}))->capture_default_str();
  if (which.adamw) {
    cli.add_option("--betas", opt.betas, "AdamW's beta1 and beta2: decay of the gradient's "
                   "running mean and of its square's")
        ->check(real_below(0.0, 1.0))
        ->default_str(CLI::detail::to_string(opt.betas.first) + " " +
                      CLI::detail::to_string(opt.betas.second));
    cli.add_option("--weight-decay", opt.weight_decay,
                   "AdamW weight decay (decoupled: p -= lr * weight_decay * p)")
        ->check(non_negative_real())->capture_default_str();
  } else {
    cli.add_option("--momentum", opt.momentum, "SGD momentum")->check(real_in(0.0, 1.0))
        ->capture_default_str();
    cli.add_option("--weight-decay", opt.weight_decay, "SGD weight decay (L2)")
        ->check(non_negative_real())->capture_default_str();
  }
  cli.add_option("--seed", opt.seed, "seed of the initial weights and the shuffling")
      ->check(non_negative_integer(9007199254740991))->capture_default_str();
  std::string device_help = which.device_help;
  if (device_help.empty())
    device_help = which.backend ? "cpu, or cuda (rank r uses cuda:<local rank>), or cuda:N"
                                : "cpu, cpu:N, cuda or cuda:N";
  cli.add_option(which.device_list ? "--device,--devices" : "--device", opt.device, device_help)
      ->capture_default_str();
  if (which.backend)
    cli.add_option("--backend", opt.backend, "auto, mpi or nccl")
        ->check(CLI::IsMember({"auto", "mpi", "nccl"}))->capture_default_str();
  cli.add_option("--train-samples", opt.train_samples,
                 "train on the first N training samples only (0: all), for quick runs")
      ->check(non_negative_integer())->capture_default_str();
  cli.add_option("--steps", opt.steps, "at most this many steps per epoch (0: whole epochs)")
      ->check(non_negative_integer())->capture_default_str();
  cli.add_option("--metrics", opt.metrics, "write one JSON line per epoch here (rank 0)");
  cli.add_option("--trace", opt.trace,
                 "write a Chrome trace of the run here (open it in https://ui.perfetto.dev)");
}

double learning_rate(const Options& opt, int epoch) {
  if (opt.schedule != "cosine") return opt.lr;
  const double pi = std::acos(-1.0);
  return opt.lr * 0.5 * (1.0 + std::cos(pi * epoch / opt.epochs));
}

void add_checkpoint_flags(CLI::App& cli, CheckpointFlags& ck) {
  cli.add_option("--checkpoint-dir", ck.dir, "folder of the checkpoints and `latest`");
  cli.add_option("--save-every", ck.save_every,
                 "save every N optimizer steps (0: at the end of every epoch)")
      ->check(non_negative_integer(std::int64_t{1} << 40))->capture_default_str();
  cli.add_option("--keep-last", ck.keep_last, "keep the newest K checkpoints (0: all)")
      ->check(non_negative_integer())->capture_default_str();
  cli.add_option("--resume", ck.resume,
                 "a checkpoint file or folder to resume from, or 'auto': the --checkpoint-dir's "
                 "latest (nothing there yet: start from scratch)");
  cli.add_flag("--allow-non-finite-checkpoint", ck.allow_non_finite,
               "resume from a checkpoint whose parameters or optimizer state hold NaN or "
               "infinity (refused by default; for debugging)");
}

bool checkpoint_flags_ok(const CheckpointFlags& ck) {
  if (ck.resume == "auto" && ck.dir.empty()) {
    std::fprintf(stderr, "error: --resume auto needs --checkpoint-dir\n");
    return false;
  }
  return true;
}

namespace {

// A word of the command line that is a flag, not a value: it starts with '-' and is not a
// number ("-0.5" is a value).
bool is_flag_word(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return false;
  double unused = 0;
  return !parse_real(word, unused) && word != "-inf" && word != "-nan";
}

// A flag that takes several values (--betas B1 B2) given fewer: CLI11 would take the next
// flag's name as the missing value ("got '--train-samples'"). Says how many it takes and
// what it got instead, for every multi-value flag of `cli`.
void check_value_counts(CLI::App& cli, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return;
    if (!is_flag_word(word)) continue;
    const std::size_t eq = word.find('=');
    const std::string name = word.substr(0, eq);
    const CLI::Option* opt = cli.get_option_no_throw(name);
    if (!opt || opt->get_items_expected_min() < 2) continue;
    const int needed = opt->get_items_expected_min();
    std::vector<std::string> given;
    if (eq != std::string::npos) {
      given.push_back(word.substr(eq + 1));
    } else {
      for (int j = i + 1; j < argc && static_cast<int>(given.size()) < needed; ++j) {
        if (is_flag_word(argv[j]) || std::string(argv[j]) == "--") break;
        given.push_back(argv[j]);
      }
    }
    if (static_cast<int>(given.size()) >= needed) continue;
    std::string got;
    for (const std::string& g : given) got += (got.empty() ? "'" : " '") + g + "'";
    std::string example = opt->get_default_str();
    std::ostringstream os;
    os << name << ": takes " << needed << " values separated by spaces";
    if (!example.empty()) os << " (e.g. " << name << " " << example << ")";
    os << ", got " << given.size() << (given.empty() ? "" : ": " + got);
    if (i + 1 + static_cast<int>(given.size()) < argc && eq == std::string::npos)
      os << " before " << argv[i + 1 + given.size()];
    throw CLI::ArgumentMismatch(os.str());
  }
}

}  // namespace

int parse_flags(CLI::App& cli, int argc, char** argv) {
  try {
    check_value_counts(cli, argc, argv);
    cli.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    // The launcher's rank, read before MPI starts: Open MPI, PMIx, MPICH/PMI and Slurm.
    for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      const char* value = std::getenv(var);
      if (value && *value && std::string(value) != "0") return e.get_exit_code();
    }
    return cli.exit(e);
  }
}

}  // namespace mgpu::app
