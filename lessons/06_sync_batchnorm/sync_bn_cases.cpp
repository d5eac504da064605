// sync_bn_cases: runs a few SyncBatchNorm cases on every rank and writes, on rank 0, one
// JSON file with each case's whole batch, dy, the layer's outputs gathered from all ranks,
// its running statistics and gradients. compare_torch.py feeds the same batches to
// PyTorch's BatchNorm in one process and prints the largest differences.
//
// The layer is the library's parallel::SyncBatchNorm: with the reference's steps in
// build/solutions/, with yours in build/lessons/.
//
//   tools/mpirun -np 3 build/solutions/06_sync_batchnorm/sync_bn_cases --out cases.json
//   tools/mpirun -np 2 build/lessons/06_sync_batchnorm/sync_bn_cases --out mine.json
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mgpu/app/ranks.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/all.h"

namespace {

using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;
namespace dist = mgpu::dist;
namespace par = mgpu::parallel;

struct Case {
  std::string name;
  Shape sample;                        // [C] or [C, ...]
  std::vector<std::int64_t> counts;    // rows per rank
  DType dtype = DType::f32;
  std::optional<double> momentum = 0.1;
  int steps = 2;
};

// Rows per rank for a pattern: "uneven" 3, 5, 2, 4, ...; "empty" the same with the last
// rank empty; "one" one row each (two in a world of one rank: one value has no variance).
std::vector<std::int64_t> split(const std::string& pattern, int world) {
  std::vector<std::int64_t> c;
  for (int r = 0; r < world; ++r)
    c.push_back(pattern == "one" ? (world == 1 ? 2 : 1) : 2 + (3 * r + 1) % 4);
  if (pattern == "empty" && world > 1) c.back() = 0;
  return c;
}

std::vector<Case> cases(int world) {
  return {
      {"[N,C] f32, different batch sizes", {4}, split("uneven", world), DType::f32, 0.1, 2},
      {"[N,C,H,W] f32, last rank empty", {3, 4, 3}, split("empty", world), DType::f32, 0.1, 2},
      {"[N,C,L] f64, different batch sizes", {2, 5}, split("uneven", world), DType::f64, 0.1, 2},
      {"[N,C] f64, momentum none", {3}, split("uneven", world), DType::f64, std::nullopt, 3},
      {"[N,C,H,W] f32, batch 1 per rank", {2, 2, 2}, split("one", world), DType::f32, 0.1, 2},
  };
}

Tensor batch(const Shape& shape, std::uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f64);
  mgpu::normal_(t, seed, 3.0, 2.0);
  return mgpu::cast(t, dtype);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Rank 0 gets every rank's `mine` (any sizes), in rank order; the others get {}.
std::vector<double> gather_to_root(dist::ProcessGroup& g, const std::vector<double>& mine) {
  if (g.rank() != 0) {
    Tensor n = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(mine.size())}, {1});
    g.send(n, 0, 1).wait();
    if (!mine.empty())
      g.send(Tensor::from_vector(mine, {static_cast<std::int64_t>(mine.size())}), 0, 2).wait();
    return {};
  }
  std::vector<double> all = mine;
  for (int r = 1; r < g.size(); ++r) {
    Tensor n = Tensor::zeros({1}, DType::i64);
    g.recv(n, r, 1).wait();
    const auto len = n.to_vector<std::int64_t>()[0];
    if (len == 0) continue;
    Tensor part = Tensor::zeros({len}, DType::f64);
    g.recv(part, r, 2).wait();
    const std::vector<double> v = values(part);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

nlohmann::json run_case(const Case& c, dist::ProcessGroup& g) {
  const int rank = g.rank();
  std::int64_t total = 0, begin = 0;
  for (int r = 0; r < g.size(); ++r) {
    if (r < rank) begin += c.counts[static_cast<std::size_t>(r)];
    total += c.counts[static_cast<std::size_t>(r)];
  }
  const std::int64_t mine = c.counts[static_cast<std::size_t>(rank)];
  Shape whole{total};
  whole.insert(whole.end(), c.sample.begin(), c.sample.end());
  const std::int64_t C = c.sample[0];
  auto bn = std::make_shared<par::SyncBatchNorm>(C, 1e-5, c.momentum, true, true, &g);
  bn->to(c.dtype);
  mgpu::uniform_(bn->weight().value, 5, 0.5, 1.5);
  mgpu::uniform_(bn->bias().value, 6, -0.5, 0.5);
  nlohmann::json out{{"name", c.name}, {"shape", whole}, {"counts", c.counts},
                     {"dtype", mgpu::dtype_name(c.dtype)}, {"eps", 1e-5},
                     {"momentum", c.momentum ? nlohmann::json(*c.momentum) : nlohmann::json()},
                     {"weight", values(bn->weight().value)}, {"bias", values(bn->bias().value)}};
  for (int step = 0; step < c.steps; ++step) {
    const Tensor x_all = batch(whole, 100 + step, c.dtype);
    const Tensor dy_all = batch(whole, 200 + step, c.dtype);
    auto rows = [&](const Tensor& t) {
      Shape s = t.shape();
      s[0] = mine;
      return mine ? t.slice(begin, begin + mine).clone() : Tensor::empty(s, t.dtype());
    };
    const Tensor y = bn->forward(rows(x_all));
    const Tensor dx = bn->backward(rows(dy_all));
    out["steps"].push_back({{"x", values(x_all)}, {"dy", values(dy_all)},
                            {"y", gather_to_root(g, values(y))},
                            {"dx", gather_to_root(g, values(dx))}});
  }
  // grad_weight / grad_bias: each rank's share, summed (what DDP's average times W is).
  Tensor gw = bn->weight().grad.clone(), gb = bn->bias().grad.clone();
  g.all_reduce(gw, dist::ReduceOp::sum).wait();
  g.all_reduce(gb, dist::ReduceOp::sum).wait();
  out["grad_weight"] = values(gw);
  out["grad_bias"] = values(gb);
  out["running_mean"] = values(bn->running_mean());
  out["running_var"] = values(bn->running_var());
  out["num_batches_tracked"] = bn->num_batches_tracked().item();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime runtime(&argc, &argv);
  std::string out_path = "sync_bn_cases.json";
  CLI::App app{"Lesson 06: SyncBatchNorm cases for compare_torch.py (whole batches, outputs, "
               "running statistics, gradients) as JSON"};
  app.add_option("--out", out_path, "the JSON file rank 0 writes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    auto g = mgpu::app::quiet_cpu_group();
    nlohmann::json all{{"world_size", g->size()}, {"cases", nlohmann::json::array()}};
    for (const Case& c : cases(g->size())) all["cases"].push_back(run_case(c, *g));
    if (g->rank() == 0) {
      std::ofstream f(out_path);
      MGPU_CHECK(f.good(), "--out: cannot write ", out_path);
      f << all.dump() << "\n";
      MGPU_CHECK(f.good(), "--out: writing ", out_path, " failed (disk full?)");
      std::printf("sync_bn_cases: %zu cases on %d rank(s) -> %s\n", all["cases"].size(),
                  g->size(), out_path.c_str());
    }
  } catch (const std::exception& e) {
    dist::abort_job(std::string("sync_bn_cases: ") + e.what());
  }
  return 0;
}
