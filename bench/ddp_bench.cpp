// bench_ddp: where a DistributedDataParallel step's time goes, and how much of the gradient
// all-reduce hides behind backward, for several bucket caps. Start it under mpirun:
//
//   tools/mpirun -np 2 build/bench/bench_ddp                   (wide MLP, every configuration)
//   tools/mpirun -np 2 build/bench/bench_ddp --model cnn --caps default
//   bench/ddp_scaling.py                                        (1 vs 2 ranks, the table)
//
// Inputs are random tensors made once, so data loading takes no part. Each configuration is
// built and runs --warmup steps (the buckets are rebuilt in gradient-ready order before the
// second); then --steps rounds run one step of every configuration in turn (interleaved, so
// a change in the machine's load hits all alike). Rank 0 prints medians [min-max] and the
// load average. Definitions:
//   step_ms   a whole step: forward, loss, backward, waiting for buckets, optimizer
//   wait_ms   from the end of backward to the end of the reduction: exposed communication
//   comm_ms   time during which some bucket's all-reduce was in flight (launch to completion,
//             from a parallel::CommLog: the completion is when the comm thread finished it)
//   hidden    the part of comm_ms that lay inside backward, over comm_ms
//   vs_one    1 - wait_ms / wait_ms of "one" (a single bucket, launched when backward ends,
//             so all of its communication is exposed): the communication time saved ("-"
//             for "none", which communicates nothing)
//   peak_MiB  the allocator's peak while the configuration was built and warmed up, above
//             what was allocated before: its own footprint (weights, grads, buckets,
//             momentum, one step's activations)
// Configurations: "default" is PyTorch's (bucket_cap_mb not given: 25 MiB, the first bucket
// 1 MiB); a number is bucket_cap_mb given (the first bucket gets the same cap); "one" a
// single bucket; a "+view" suffix adds gradient_as_bucket_view (e.g. default+view: the
// grads live in the buckets, one gradient-sized copy less); "none" trains the bare model on every rank with no DDP at all (no
// collective): the step time the ranks' compute alone takes when W processes share the
// machine, to tell a slowdown of the compute from the cost of communication.
// The default sweep suits the default model: the wide MLP's 19 MiB of gradients (six
// weight matrices, up to 4 MiB each) make 6, 3, 2 and 1 buckets at caps 1, 5, 10 and "one",
// and "default" 2. Two configurations whose buckets come out the same on a model (the
// CNN's 1.6 MiB fit in one bucket at any cap from 2 MiB) are named in a note under the table.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "mgpu/stream.h"
#include "mgpu/app/flags.h"
#include "mgpu/threads.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace dist = mgpu::dist;
namespace nn = mgpu::nn;
namespace par = mgpu::parallel;

struct Options {
  std::string model = "wide";
  std::int64_t hidden = 1024;
  int layers = 6;
  std::int64_t batch_size = 64;
  int steps = 20, warmup = 3;
  std::string caps = "default,default+view,1,5,10,one";
  std::string device = "cpu";
  std::string backend = "auto";
  std::string json;
};

std::shared_ptr<nn::Sequential> make_model(const Options& o) {
  if (o.model == "cnn") return nn::make_model("cnn");  // lesson 01's CNN
  auto m = std::make_shared<nn::Sequential>();
  // "mlp": lesson 01's MLP; "wide": `layers` Linear layers of `hidden` units, enough
  // gradient bytes for the bucket caps to matter.
  const std::int64_t hidden = o.model == "mlp" ? 256 : o.hidden;
  const int layers = o.model == "mlp" ? 3 : o.layers;
  m->add(std::make_shared<nn::Flatten>());
  std::int64_t in = 28 * 28;
  for (int l = 0; l + 1 < layers; ++l) {
    const std::int64_t out = o.model == "mlp" && l == 1 ? 128 : hidden;
    m->add(std::make_shared<nn::Linear>(in, out));
    m->add(std::make_shared<nn::ReLU>());
    in = out;
  }
  m->add(std::make_shared<nn::Linear>(in, 10));
  return m;
}

// Length of the union of intervals, and of its part inside [lo, hi].
std::pair<double, double> union_length(std::vector<std::pair<double, double>> iv, double lo, double hi) {
  std::sort(iv.begin(), iv.end());
  double total = 0, inside = 0, cur_a = 0, cur_b = -1;
  auto flush = [&] {
    if (cur_b <= cur_a) return;
    total += cur_b - cur_a;
    inside += std::max(0.0, std::min(cur_b, hi) - std::max(cur_a, lo));
  };
  for (const auto& [a, b] : iv) {
    if (a > cur_b) {
      flush();
      cur_a = a;
      cur_b = b;
    } else {
      cur_b = std::max(cur_b, b);
    }
  }
  flush();
  return {total, inside};
}

// A cap in MiB, or a one-line error naming the bad entry.
double parse_cap(const std::string& cap) {
  std::size_t used = 0;
  double mib = -1;
  try {
    mib = std::stod(cap, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MGPU_CHECK(used == cap.size() && mib >= 0, "--caps: '", cap, "' is not a configuration; give "
             "default, one, none or a cap in MiB (a number >= 0)");
  return mib;
}

// One configuration under test: its own model, optimizer and (unless "none") DDP.
struct Contender {
  std::string name;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<par::DistributedDataParallel> ddp;  // null for "none"
  std::unique_ptr<mgpu::optim::SGD> opt;
  par::CommLog timer;
  double peak_mib = 0;  // its peak footprint while built and warmed up (allocator's peak)
  // Per measured step.
  std::vector<double> step_ms, fwd_ms, bwd_ms, wait_ms, comm_ms, hidden_ms;
};

std::unique_ptr<Contender> make_contender(const Options& o, const std::string& config,
                                          dist::ProcessGroup& group, const Device& device) {
  auto c = std::make_unique<Contender>();
  nn::manual_seed(0);
  c->model = make_model(o);
  c->model->to(device);
  if (config == "none") {
    c->name = "none (no DDP)";
    c->opt = std::make_unique<mgpu::optim::SGD>(c->model->parameters(), mgpu::optim::SGDOptions{0.01, 0.9, 0.0});
    return c;
  }
  par::DDPOptions d;
  std::string cap = config;
  if (cap.size() > 5 && cap.compare(cap.size() - 5, 5, "+view") == 0) {
    d.gradient_as_bucket_view = true;  // the grads live in the buckets
    cap.resize(cap.size() - 5);
  }
  if (cap == "one") {
    d.bucket_cap_mb = 1e9;
  } else if (cap != "default") {
    d.bucket_cap_mb = parse_cap(cap);
  }
  c->name = (cap == "one" ? "one bucket" : cap == "default" ? "default 1+25" : "cap " + cap) +
            (d.gradient_as_bucket_view ? " view" : "");
  c->ddp = std::make_unique<par::DistributedDataParallel>(c->model, group, d);
  c->ddp->reducer().set_comm_log(&c->timer);
  c->opt = std::make_unique<mgpu::optim::SGD>(c->ddp->parameters(), mgpu::optim::SGDOptions{0.01, 0.9, 0.0});
  return c;
}

// One training step of `c`; `measure` keeps its timings.
void step(Contender& c, dist::ProcessGroup& group, const Device& device, const Tensor& x,
          const Tensor& y, bool measure) {
  nn::CrossEntropyLoss loss;
  mgpu::synchronize(device);
  group.barrier().wait();  // every rank starts the step together
  const double t0 = par::clock_s();
  c.opt->zero_grad();
  if (!c.ddp) {  // the bare model: compute only
    const Tensor logits = c.model->forward(x);
    loss.forward(logits, y);
    mgpu::synchronize(device);
    const double t1 = par::clock_s();
    c.model->backward(loss.backward());
    mgpu::synchronize(device);
    const double t2 = par::clock_s();
    c.opt->step();
    mgpu::synchronize(device);
    if (!measure) return;
    c.step_ms.push_back(1e3 * (par::clock_s() - t0));
    c.fwd_ms.push_back(1e3 * (t1 - t0));
    c.bwd_ms.push_back(1e3 * (t2 - t1));
    return;
  }
  const Tensor logits = c.ddp->forward(x);
  loss.forward(logits, y);
  c.ddp->backward(loss.backward());
  c.opt->step();
  mgpu::synchronize(device);
  const double t1 = par::clock_s();
  const std::vector<par::CommRecord> timings = c.timer.take();
  if (!measure) return;
  const par::StepTimeline& t = c.ddp->last_step();
  std::vector<std::pair<double, double>> comm;
  for (const par::CommRecord& b : timings) comm.emplace_back(b.launch_s, b.done_s);
  const auto [total, inside] = union_length(comm, t.backward_begin, t.backward_end);
  c.step_ms.push_back(1e3 * (t1 - t0));
  c.fwd_ms.push_back(1e3 * (t.forward_end - t.forward_begin));
  c.bwd_ms.push_back(1e3 * (t.backward_end - t.backward_begin));
  c.wait_ms.push_back(1e3 * (t.reduce_end - t.backward_end));
  c.comm_ms.push_back(1e3 * total);
  c.hidden_ms.push_back(1e3 * inside);
}

// What the configuration's buckets hold (variable indices, bucket by bucket, and whether
// the grads are views), to tell configurations that differ in name only.
std::string bucket_layout(const Contender& c) {
  if (!c.ddp) return "none";
  const par::Reducer& r = c.ddp->reducer();
  std::ostringstream os;
  os << (r.options().gradient_as_bucket_view ? "view:" : "copy:");
  for (std::size_t b = 0; b < r.num_buckets(); ++b) {
    for (std::size_t v : r.bucket_variables(b)) os << v << ',';
    os << '|';
  }
  return os.str();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double min_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

int run(const Options& o) {
  const Device device = dist::rank_device(o.device);
  dist::ProcessGroup& group = dist::init_process_group(o.backend, device);
  const int world = group.size();
  // The same random batch shape on every rank (different values per rank).
  Tensor x = Tensor::empty({o.batch_size, 1, 28, 28});
  mgpu::normal_(x, 100 + static_cast<std::uint64_t>(group.rank()));
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < o.batch_size; ++i) labels.push_back((i * 7 + group.rank()) % 10);
  Tensor y = Tensor::from_vector(labels, {o.batch_size});
  x = x.to(device);
  y = y.to(device);

  nn::manual_seed(0);
  auto probe = make_model(o);
  dist::log0("bench_ddp: ", world, " rank(s), backend ", group.backend_name(), ", device ",
             device.str(), "; CPU per rank: ", mgpu::cpu_threading_summary());
  dist::log0("model ", o.model, ": ", probe->num_parameters(), " parameters, ",
             static_cast<double>(probe->num_parameters()) * 4 / (1024.0 * 1024.0),
             " MiB of f32 gradients; batch ", o.batch_size, " per rank; ", o.warmup,
             " warm-up steps each, then ", o.steps, " rounds, one step of every configuration "
             "per round (interleaved)");
  const std::string load_before = load_average();

  // Build and warm up each configuration in turn: the allocator's peak counter, reset
  // before each, gives that configuration's own footprint (the others hold still).
  std::vector<std::unique_ptr<Contender>> contenders;
  std::stringstream configs(o.caps);
  for (std::string config; std::getline(configs, config, ',');) {
    mgpu::synchronize(device);
    const std::size_t before = mgpu::memory_stats(device).allocated;
    mgpu::reset_peak_memory(device);
    contenders.push_back(make_contender(o, config, group, device));
    for (int s = 0; s < o.warmup; ++s) step(*contenders.back(), group, device, x, y, false);
    mgpu::synchronize(device);
    contenders.back()->peak_mib =
        static_cast<double>(mgpu::memory_stats(device).peak_allocated - before) / (1024.0 * 1024.0);
  }
  // Measure: A B C ... A B C ..., so that a change of the machine's load hits all alike.
  for (int s = 0; s < o.steps; ++s)
    for (auto& c : contenders) step(*c, group, device, x, y, true);

  double one_wait = -1;
  for (const auto& c : contenders)
    if (c->name == "one bucket") one_wait = median(c->wait_ms);
  if (group.rank() == 0) {
    std::printf("rank 0's medians over %d interleaved steps [min-max]; load average %s before, "
                "%s after\n", o.steps, load_before.c_str(), load_average().c_str());
    std::printf("%-17s %7s %20s %10s %8s %8s %18s %8s %7s %7s %8s\n", "config", "buckets",
                "step_ms", "samples/s", "fwd_ms", "bwd_ms", "wait_ms", "comm_ms", "hidden",
                "vs_one", "peak_MiB");
    std::ofstream json;
    if (!o.json.empty()) json.open(o.json, std::ios::app);
    for (const auto& c : contenders) {
      const double step_ms = median(c->step_ms), wait = median(c->wait_ms);
      const double comm = median(c->comm_ms), hidden_ms = median(c->hidden_ms);
      const double hidden = comm > 0 ? hidden_ms / comm : 0;
      const double vs_one = one_wait > 0 && c->ddp ? 1 - wait / one_wait : 0;
      const double samples_per_s = 1e3 * static_cast<double>(x.size(0) * world) / step_ms;
      const std::size_t buckets = c->ddp ? c->ddp->reducer().num_buckets() : 0;
      char step_s[64], wait_s[64];
      std::snprintf(step_s, sizeof step_s, "%.2f [%.2f-%.2f]", step_ms, min_of(c->step_ms), max_of(c->step_ms));
      std::snprintf(wait_s, sizeof wait_s, "%.2f [%.2f-%.2f]", wait, min_of(c->wait_ms), max_of(c->wait_ms));
      char vs_one_s[16] = "-";
      if (c->ddp && one_wait > 0) std::snprintf(vs_one_s, sizeof vs_one_s, "%.0f%%", 100 * vs_one);
      std::printf("%-17s %7zu %20s %10.0f %8.2f %8.2f %18s %8.2f %6.0f%% %7s %8.1f\n",
                  c->name.c_str(), buckets, step_s, samples_per_s, median(c->fwd_ms),
                  median(c->bwd_ms), c->ddp ? wait_s : "-", comm, 100 * hidden, vs_one_s,
                  c->peak_mib);
      if (json.is_open())
        json << nlohmann::json{{"model", o.model}, {"world_size", world},
                               {"batch_per_rank", o.batch_size}, {"config", c->name},
                               {"buckets", buckets}, {"step_ms", step_ms},
                               {"step_ms_min", min_of(c->step_ms)}, {"step_ms_max", max_of(c->step_ms)},
                               {"samples_per_s", samples_per_s}, {"forward_ms", median(c->fwd_ms)},
                               {"backward_ms", median(c->bwd_ms)}, {"wait_ms", wait},
                               {"comm_ms", comm}, {"hidden_share", hidden},
                               {"saved_vs_one_bucket", one_wait > 0 && c->ddp ? nlohmann::json(vs_one) : nlohmann::json()},
                               {"peak_mib", c->peak_mib}, {"load_before", load_before},
                               {"threads", mgpu::num_threads()}}
                    .dump()
             << "\n";
    }
    // Configurations that came out the same are one measurement under two names.
    for (std::size_t i = 0; i < contenders.size(); ++i)
      for (std::size_t j = i + 1; j < contenders.size(); ++j)
        if (bucket_layout(*contenders[i]) == bucket_layout(*contenders[j]))
          std::printf("note: '%s' and '%s' have the same buckets on this model: the same "
                      "configuration (a model with more gradient bytes tells them apart: --model wide, "
                      "--hidden, --layers)\n",
                      contenders[i]->name.c_str(), contenders[j]->name.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"DDP step time, exposed communication and overlap for several bucket caps "
               "(run under mpirun)."};
  app.add_option("--model", o.model, "cnn, mlp (lesson 01's) or wide")
      ->check(CLI::IsMember({"cnn", "mlp", "wide"}))->capture_default_str();
  app.add_option("--hidden", o.hidden, "units per layer of the wide MLP")->capture_default_str();
  app.add_option("--layers", o.layers, "Linear layers of the wide MLP")
      ->check(CLI::Range(2, 64))->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "samples per rank per step")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  app.add_option("--steps", o.steps, "measured steps per configuration")
      ->check(mgpu::app::positive_integer())->capture_default_str();
  app.add_option("--warmup", o.warmup,
                 "unmeasured steps first (at least 2: the buckets are rebuilt in the second)")
      ->check(CLI::Range(2, 1000000))->capture_default_str();
  app.add_option("--caps", o.caps,
                 "comma-separated configurations: 'default' (PyTorch's 1 MiB + 25 MiB), a "
                 "bucket cap in MiB, 'one' (a single bucket), each optionally +view "
                 "(gradient_as_bucket_view); 'none' (no DDP)")
      ->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  app.add_option("--backend", o.backend, "auto, mpi or nccl")->capture_default_str();
  app.add_option("--json", o.json, "rank 0 appends one JSON line per configuration here");
  CLI11_PARSE(app, argc, argv);
  try {
    dist::Runtime runtime(&argc, &argv);
    try {
      return run(o);
    } catch (const std::exception& e) {
      dist::abort_job(std::string("bench_ddp: ") + e.what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
}
