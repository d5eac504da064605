// bench_ddp: where a DistributedDataParallel step's time goes, and how much of the gradient
// all-reduce hides behind backward, for several bucket caps. Start it under mpirun:
//
//   mpirun -np 2 build/bench/bench_ddp                         (wide MLP, caps 1 5 25 100 one)
//   mpirun -np 2 build/bench/bench_ddp --model cnn --caps 25
//   bench/ddp_scaling.py                                        (1 vs 2 ranks, the table)
//
// Inputs are random tensors made once, so data loading takes no part. Each configuration
// runs --warmup steps, then --steps measured ones; rank 0 prints the means. Definitions:
//   step_ms   a whole step: forward, loss, backward, waiting for buckets, optimizer
//   wait_ms   from the end of backward to the end of the reduction: exposed communication
//   comm_ms   time during which some bucket's all-reduce was in flight (launch to completion)
//   hidden    the part of comm_ms that lay inside backward, over comm_ms (from the timings)
//   vs_one    1 - wait_ms / wait_ms of "one" (a single bucket, launched when backward ends,
//             so all of its communication is exposed): the communication time saved
// The configuration "none" trains the bare model on every rank with no DDP at all (no
// collective): the step time the ranks' compute alone takes when W processes share the
// machine, to tell a slowdown of the compute from the cost of communication.
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

#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"
#include "mgpu/stream.h"

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
  std::string caps = "1,5,25,100,one";
  std::string device = "cpu";
  std::string backend = "auto";
  std::string json;
};

std::shared_ptr<nn::Sequential> make_model(const Options& o) {
  if (o.model == "cnn") return nn::fashion_mnist_model("cnn");  // lesson 01's CNN
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

struct Result {
  std::string config;
  std::size_t buckets = 0;
  double step_ms = 0, fwd_ms = 0, bwd_ms = 0, wait_ms = 0, comm_ms = 0, hidden_ms = 0;
  double samples_per_s = 0;
};

// The bare model, no DDP: the compute-only baseline ("none").
Result run_local(const Options& o, dist::ProcessGroup& group, const Device& device,
                 const Tensor& x, const Tensor& y) {
  nn::manual_seed(0);
  auto model = make_model(o);
  model->to(device);
  mgpu::optim::SGD opt(model->parameters(), {0.01, 0.9, 0.0});
  nn::CrossEntropyLoss loss;
  Result r;
  r.config = "none (no DDP)";
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    mgpu::synchronize(device);
    group.barrier().wait();
    const double t0 = par::clock_s();
    opt.zero_grad();
    const Tensor logits = model->forward(x);
    loss.forward(logits, y);
    mgpu::synchronize(device);
    const double t1 = par::clock_s();
    model->backward(loss.backward());
    mgpu::synchronize(device);
    const double t2 = par::clock_s();
    opt.step();
    mgpu::synchronize(device);
    const double t3 = par::clock_s();
    if (s < o.warmup) continue;
    r.step_ms += 1e3 * (t3 - t0);
    r.fwd_ms += 1e3 * (t1 - t0);
    r.bwd_ms += 1e3 * (t2 - t1);
  }
  for (double* v : {&r.step_ms, &r.fwd_ms, &r.bwd_ms}) *v /= o.steps;
  r.samples_per_s = 1e3 * static_cast<double>(x.size(0) * group.size()) / r.step_ms;
  return r;
}

Result run_config(const Options& o, const std::string& cap, dist::ProcessGroup& group,
                  const Device& device, const Tensor& x, const Tensor& y) {
  if (cap == "none") return run_local(o, group, device, x, y);
  nn::manual_seed(0);
  auto model = make_model(o);
  model->to(device);
  par::DDPOptions d;
  d.record_timings = true;
  if (cap == "one") {
    d.bucket_cap_mb = d.first_bucket_cap_mb = 1e9;
  } else {
    d.bucket_cap_mb = std::stod(cap);
  }
  par::DistributedDataParallel ddp(model, group, d);
  mgpu::optim::SGD opt(ddp.parameters(), {0.01, 0.9, 0.0});
  nn::CrossEntropyLoss loss;
  Result r;
  r.config = cap == "one" ? "one bucket" : "cap " + cap + " MiB";
  r.buckets = ddp.reducer().num_buckets();
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    mgpu::synchronize(device);
    group.barrier().wait();  // every rank starts the step together
    const double t0 = par::clock_s();
    opt.zero_grad();
    const Tensor logits = ddp.forward(x);
    loss.forward(logits, y);
    ddp.backward(loss.backward());
    opt.step();
    mgpu::synchronize(device);
    const double t1 = par::clock_s();
    if (s < o.warmup) continue;
    const par::StepTimeline& t = ddp.last_step();
    std::vector<std::pair<double, double>> comm;
    for (const par::BucketTiming& b : t.buckets) comm.emplace_back(b.launch_s, b.done_s);
    const auto [total, inside] = union_length(comm, t.backward_begin, t.backward_end);
    r.step_ms += 1e3 * (t1 - t0);
    r.fwd_ms += 1e3 * (t.forward_end - t.forward_begin);
    r.bwd_ms += 1e3 * (t.backward_end - t.backward_begin);
    r.wait_ms += 1e3 * (t.reduce_end - t.backward_end);
    r.comm_ms += 1e3 * total;
    r.hidden_ms += 1e3 * inside;
  }
  for (double* v : {&r.step_ms, &r.fwd_ms, &r.bwd_ms, &r.wait_ms, &r.comm_ms, &r.hidden_ms})
    *v /= o.steps;
  r.samples_per_s = 1e3 * static_cast<double>(x.size(0) * group.size()) / r.step_ms;
  return r;
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
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
  dist::log0("bench_ddp: ", world, " rank(s), backend ", group.backend_name(), ", device ",
             device.str(), ", OPENBLAS_NUM_THREADS=", blas_threads ? blas_threads : "(unset)");
  dist::log0("model ", o.model, ": ", probe->num_parameters(), " parameters, ",
             static_cast<double>(probe->num_parameters()) * 4 / (1024.0 * 1024.0),
             " MiB of f32 gradients; batch ", o.batch_size, " per rank; ", o.steps,
             " steps after ", o.warmup, " warm-up");

  std::vector<Result> results;
  std::stringstream caps(o.caps);
  for (std::string cap; std::getline(caps, cap, ',');) results.push_back(run_config(o, cap, group, device, x, y));
  double one_wait = -1;
  for (const Result& r : results)
    if (r.config == "one bucket") one_wait = r.wait_ms;

  if (group.rank() == 0) {
    std::printf("%-14s %7s %9s %10s %8s %8s %8s %8s %7s %7s\n", "config", "buckets", "step_ms",
                "samples/s", "fwd_ms", "bwd_ms", "wait_ms", "comm_ms", "hidden", "vs_one");
    std::ofstream json;
    if (!o.json.empty()) json.open(o.json, std::ios::app);
    for (const Result& r : results) {
      const double hidden = r.comm_ms > 0 ? r.hidden_ms / r.comm_ms : 0;
      const double vs_one = one_wait > 0 ? 1 - r.wait_ms / one_wait : 0;
      std::printf("%-14s %7zu %9.2f %10.0f %8.2f %8.2f %8.2f %8.2f %6.0f%% %6.0f%%\n",
                  r.config.c_str(), r.buckets, r.step_ms, r.samples_per_s, r.fwd_ms, r.bwd_ms,
                  r.wait_ms, r.comm_ms, 100 * hidden, 100 * vs_one);
      if (json.is_open())
        json << nlohmann::json{{"model", o.model}, {"world_size", world},
                               {"batch_per_rank", o.batch_size}, {"config", r.config},
                               {"buckets", r.buckets}, {"step_ms", r.step_ms},
                               {"samples_per_s", r.samples_per_s}, {"forward_ms", r.fwd_ms},
                               {"backward_ms", r.bwd_ms}, {"wait_ms", r.wait_ms},
                               {"comm_ms", r.comm_ms}, {"hidden_share", hidden},
                               {"saved_vs_one_bucket", one_wait > 0 ? nlohmann::json(vs_one) : nlohmann::json()},
                               {"blas_threads", std::string(blas_threads ? blas_threads : "")}}
                    .dump()
             << "\n";
    }
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
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", o.steps, "measured steps per configuration")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "unmeasured steps first")->capture_default_str();
  app.add_option("--caps", o.caps,
                 "comma-separated bucket caps in MiB; 'one' = a single bucket, 'none' = no DDP")
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
