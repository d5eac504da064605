// bench_allreduce: lesson 04's program. Times your ring all-reduce and the library's
// all_reduce side by side, size after size, and prints them the way nccl-tests does (time,
// algorithm bandwidth, bus bandwidth); then fits the alpha-beta model to your ring's times
// (task 4) and compares its predictions with the measurements.
//
//   mpirun -np 4 build/solutions/04_collectives/bench_allreduce --max-size 64M
//   mpirun -np 2 build/lessons/04_collectives/bench_allreduce --device cuda --backend mpi
//   build/solutions/04_collectives/bench_allreduce            (a world of 1: refused, nothing to time)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "mgpu/app/flags.h"
#include "mgpu/app/ranks.h"
#include "mgpu/dist/dist.h"
#include "mgpu/dist/ring.h"
#include "mgpu/ops.h"
#include "mgpu/perf/link_model.h"
#include "mgpu/stream.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace dist = mgpu::dist;
namespace perf = mgpu::perf;
using lesson04_bench::kMinCalls;
using lesson04_bench::time_op;

constexpr std::int64_t kMaxBytes = std::int64_t(64) << 30;  // keeps every size product in int64
struct Options {
  std::string min_size = "1K";
  std::string max_size = "256M";
  int factor = 2;
  int iters = 0;  // 0: as many as fit in --seconds
  int warmup = 2;
  int rounds = 3;
  double seconds = 0.3;
  std::string device = "cpu";
  std::string backend = "auto";
  std::string csv;
};

// "4096", "1K", "64M", "1G", "64MiB" -> bytes (K = 1024); `flag` names it in errors.
std::int64_t parse_size(const std::string& flag, const std::string& text) {
  const std::string expected = "' (expected a number of bytes with an optional K, M or G "
                               "suffix, e.g. 4096, 1K, 64M, 1G)";
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    MGPU_FAIL(flag, ": bad size '", text, expected);
  }
  std::string unit = text.substr(pos);
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'i') unit.pop_back();
  const std::string units = "KMG";
  std::int64_t scale = 1;
  if (!unit.empty()) {
    auto k = units.find(static_cast<char>(std::toupper(unit[0])));
    MGPU_CHECK(unit.size() == 1 && k != std::string::npos, flag, ": bad size '", text, expected);
    scale = std::int64_t(1) << (10 * (k + 1));
  }
  // Bounded before the cast: a double beyond int64 has no defined conversion.
  MGPU_CHECK(std::isfinite(v) && v * scale >= 1 && v * scale <= double(kMaxBytes), flag,
             ": size '", text, "' is out of range (from 1 byte to 64G)");
  return static_cast<std::int64_t>(v * scale);
}

// Rank r's values: small integers, so every sum is exact in f32 and any wrong element shows.
Tensor rank_data(std::int64_t count, int rank, const Device& dev) {
  std::vector<float> v(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 7 + rank) % 13);
  return Tensor::from_vector(v, {count}, dev);
}

// Bytes of memory the machine has available now (Linux: MemAvailable), or -1 if unknown.
std::int64_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  for (std::int64_t kib = 0; meminfo >> key >> kib;) {
    if (key == "MemAvailable:") return kib * 1024;
    meminfo.ignore(256, '\n');
  }
  return -1;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(std::int64_t(1) << 30));
  return text;
}

// The largest message must fit: each rank holds about kHostCopies copies of it in host
// memory (the two correctness tensors, their host copies, the timed tensor; the device ones
// on the GPU), the node's ranks together. Refused here with the sizes instead of a
// std::bad_alloc (or the kernel's OOM killer) part way through the table.
constexpr int kHostCopies = 5, kDeviceCopies = 3;
void check_memory(std::int64_t max_bytes, const std::string& max_flag, const Device& dev) {
  const int ranks = dist::local_world_size();
  const double host_need = double(kHostCopies) * double(max_bytes) * ranks;
  const std::int64_t host_have = host_memory_available();
  MGPU_CHECK(host_have < 0 || host_need <= double(host_have), "the largest message, ",
             max_flag, " (", max_bytes, " bytes), needs about ", gib(host_need),
             " of host memory (", kHostCopies, " copies on each of this node's ", ranks,
             " rank(s)) but ", gib(double(host_have)),
             " is available; give a smaller --max-size (or --min-size)");
  if (!dev.is_cuda()) return;
  const double device_need = double(kDeviceCopies) * double(max_bytes);
  const double device_have = double(mgpu::device_properties(dev).total_memory);
  MGPU_CHECK(device_need <= device_have, "the largest message, ", max_flag, " (", max_bytes,
             " bytes), needs about ", gib(device_need), " of GPU memory (", kDeviceCopies,
             " copies) but ", dev.str(), " has ", gib(device_have),
             " in all; give a smaller --max-size (or --min-size)");
}

struct Row {
  std::int64_t bytes = 0, count = 0;
  double ring_s = 0, lib_s = 0;
  std::int64_t wrong = 0;
};

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime runtime(&argc, &argv);
  Options opt;
  CLI::App app{"Lesson 04: your ring all-reduce vs the library's all_reduce, nccl-tests style, "
               "and the alpha-beta model fitted to your ring"};
  app.add_option("--min-size", opt.min_size, "smallest message (bytes; K, M, G suffixes)")->capture_default_str();
  app.add_option("--max-size", opt.max_size, "largest message")->capture_default_str();
  app.add_option("--step-factor", opt.factor, "size multiplier from one row to the next")->capture_default_str();
  app.add_option("--iters", opt.iters, "timed calls per round (0: as many as fit in --seconds, at least 3)")
      ->capture_default_str()->check(mgpu::app::non_negative_integer());
  app.add_option("--warmup", opt.warmup, "untimed calls per size first")
      ->capture_default_str()->check(mgpu::app::non_negative_integer());
  app.add_option("--rounds", opt.rounds, "timed rounds, ring and library taking turns; the fastest counts")
      ->capture_default_str()->check(mgpu::app::positive_integer());
  app.add_option("--seconds", opt.seconds, "time per size and implementation, all rounds together, when --iters is 0")
      ->capture_default_str()->check(mgpu::app::real_in(0.001, 3600));
  app.add_option("--device", opt.device, "cpu, or cuda (each rank on cuda:local_rank)")->capture_default_str();
  app.add_option("--backend", opt.backend, "auto, mpi or nccl")->capture_default_str();
  app.add_option("--csv", opt.csv, "also write the table as CSV to this file (rank 0)");
  MGPU_PARSE_FLAGS(app, argc, argv);

  try {
    const std::int64_t min_bytes = std::max<std::int64_t>(4, parse_size("--min-size", opt.min_size));
    const std::int64_t max_bytes = parse_size("--max-size", opt.max_size);
    MGPU_CHECK(min_bytes <= max_bytes, "--min-size ", opt.min_size, " (", min_bytes,
               " bytes; one f32 at least) is larger than --max-size ", opt.max_size, " (",
               max_bytes, " bytes): no size to measure; give a --max-size at least as large");
    MGPU_CHECK(opt.factor >= 2, "--step-factor must be at least 2");
    std::vector<std::int64_t> sizes{min_bytes};  // grown without passing max (no overflow)
    while (sizes.back() <= max_bytes / opt.factor) sizes.push_back(sizes.back() * opt.factor);
    const Device dev = dist::rank_device(opt.device);
    check_memory(sizes.back(), sizes.back() == min_bytes ? "--min-size " + opt.min_size
                                                         : "--max-size " + opt.max_size, dev);
    auto ctl = mgpu::app::quiet_cpu_group();  // the clock's barrier and max
    auto pg = dist::new_group(opt.backend, dev);               // the one being measured
    const int p = pg->size(), r = pg->rank();
    // A usage error like a wrong flag: nothing was measured, so the exit status says so.
    MGPU_CHECK(p > 1, "a world of 1 rank has nothing to communicate; start it with "
               "tools/mpirun -np 2 (or more)");
    // The CSV file is opened before the run: a bad path costs nothing.
    std::ofstream csv;
    if (!opt.csv.empty() && r == 0) {
      csv.open(opt.csv);
      MGPU_CHECK(csv.is_open(), "--csv: cannot write '", opt.csv,
                 "' (does its folder exist, and may you write there?)");
    }
    auto sync = [&] {
      if (dev.is_cuda()) mgpu::synchronize(dev);
    };
    auto ring = [&](const Tensor& t) { dist::ring_all_reduce(*pg, t); sync(); };
    auto library = [&](const Tensor& t) { pg->all_reduce(t).wait(); sync(); };

    // Is the ring there at all? An unfinished exercise throws at once, on every rank alike.
    bool have_ring = true;
    std::string ring_missing;
    try {
      Tensor probe = rank_data(4 * p, r, dev);
      dist::ring_all_reduce(*pg, probe);
    } catch (const mgpu::Error& e) {
      have_ring = false;
      ring_missing = e.what();
    }

    const double bus_factor = 2.0 * (p - 1) / p;  // busbw = algbw * 2(p-1)/p (nccl-tests)
    dist::log0("# bench_allreduce: ", p, " ranks on ", dist::num_nodes(), " node(s), backend ",
               pg->backend_name(), ", device ", opt.device, ", dtype f32, ",
               opt.iters > 0 ? mgpu::detail::concat(opt.iters, " calls")
                             : mgpu::detail::concat("~", opt.seconds / opt.rounds, " s (at least ",
                                                    kMinCalls, " calls)"),
               " per round, best of ", opt.rounds, " rounds per size, load average ",
               lesson04_bench::load_average());
    if (!have_ring) dist::log0("# ring: not run: ", ring_missing);
    dist::log0("#                         ring (lesson 04)                 library all_reduce (",
               pg->backend_name(), ")");
    dist::log0("#       size      count   time(us)  algbw  busbw      time(us)  algbw  busbw   ring/lib  #wrong     calls");
    dist::log0("#        (B) (elements)            (GB/s) (GB/s)               (GB/s) (GB/s)  (busbw)         ring/lib");

    std::vector<Row> rows;
    for (const std::int64_t bytes : sizes) {
      Row row;
      row.count = bytes / 4;
      row.bytes = row.count * 4;
      // Correctness first: the ring's result against the library's, element by element.
      if (have_ring) {
        Tensor a = rank_data(row.count, r, dev), b = rank_data(row.count, r, dev);
        dist::ring_all_reduce(*pg, a);
        pg->all_reduce(b).wait();
        std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
        std::int64_t wrong = 0;
        for (std::size_t i = 0; i < va.size(); ++i) wrong += va[i] != vb[i];
        Tensor w = Tensor::from_vector(std::vector<std::int64_t>{wrong}, {1});
        ctl->all_reduce(w).wait();
        row.wrong = w.to_vector<std::int64_t>()[0];
      }
      // Then the clock, on zeros (values that grow every call could overflow to inf). Ring
      // and library take turns, round after round, and each keeps its fastest round: a
      // machine busy with other work slows both alike instead of whichever ran second.
      Tensor data = Tensor::zeros({row.count}, mgpu::DType::f32, dev);
      auto calls = [&](const std::function<void(const Tensor&)>& op) {
        for (int i = 0; i < opt.warmup; ++i) op(data);
        if (opt.iters > 0) return opt.iters;
        // Every rank must agree on the count: use the slowest rank's estimate.
        double once = time_op(*ctl, [&] { op(data); }, 1);
        // A message slower than the budget still gets kMinCalls calls a round.
        return static_cast<int>(std::clamp(opt.seconds / opt.rounds / std::max(once, 1e-9),
                                           double(kMinCalls), 1000.0));
      };
      const int ring_iters = have_ring ? calls(ring) : 0;
      const int lib_iters = calls(library);
      row.ring_s = row.lib_s = 1e30;
      for (int round = 0; round < opt.rounds; ++round) {
        if (have_ring) row.ring_s = std::min(row.ring_s, time_op(*ctl, [&] { ring(data); }, ring_iters));
        row.lib_s = std::min(row.lib_s, time_op(*ctl, [&] { library(data); }, lib_iters));
      }
      if (!have_ring) row.ring_s = 0;
      rows.push_back(row);

      auto algbw = [&](double s) { return s > 0 ? row.bytes / s / 1e9 : 0.0; };
      // The last column: the timed calls per round each row's times are averaged over.
      const std::string calls_used = (have_ring ? std::to_string(ring_iters) : "-") + "/" +
                                     std::to_string(lib_iters);
      char line[256];
      if (have_ring) {
        std::snprintf(line, sizeof line,
                      "%12lld %10lld %10.1f %6.2f %6.2f    %10.1f %6.2f %6.2f   %8.2f  %6lld %9s",
                      static_cast<long long>(row.bytes), static_cast<long long>(row.count),
                      row.ring_s * 1e6, algbw(row.ring_s), algbw(row.ring_s) * bus_factor,
                      row.lib_s * 1e6, algbw(row.lib_s), algbw(row.lib_s) * bus_factor,
                      row.lib_s / row.ring_s, static_cast<long long>(row.wrong),
                      calls_used.c_str());
      } else {
        std::snprintf(line, sizeof line,
                      "%12lld %10lld %10s %6s %6s    %10.1f %6.2f %6.2f   %8s  %6s %9s",
                      static_cast<long long>(row.bytes), static_cast<long long>(row.count), "-",
                      "-", "-", row.lib_s * 1e6, algbw(row.lib_s), algbw(row.lib_s) * bus_factor,
                      "-", "-", calls_used.c_str());
      }
      dist::log0(line);
    }

    // Averages as nccl-tests prints them, and the ratio at the largest size.
    double ring_bus = 0, lib_bus = 0;
    for (const Row& row : rows) {
      if (have_ring) ring_bus += row.bytes / row.ring_s / 1e9 * bus_factor / rows.size();
      lib_bus += row.bytes / row.lib_s / 1e9 * bus_factor / rows.size();
    }
    std::int64_t total_wrong = 0;
    for (const Row& row : rows) total_wrong += row.wrong;
    if (have_ring && !rows.empty()) {
      dist::log0("# Out of bounds values : ", total_wrong, total_wrong ? " WRONG" : " OK");
      dist::log0("# Avg bus bandwidth    : ring ", ring_bus, " GB/s, library ", lib_bus, " GB/s");
      dist::log0("# ring/library busbw at ", rows.back().bytes, " B: ",
                 rows.back().lib_s / rows.back().ring_s);
    } else {
      dist::log0("# Avg bus bandwidth    : library ", lib_bus, " GB/s");
    }

    // Task 4: the alpha-beta model of the ring, and how well it predicts each size.
    if (have_ring && rows.size() >= 2) {
      std::vector<perf::AllReduceTiming> timings;
      for (const Row& row : rows) timings.push_back({static_cast<double>(row.bytes), row.ring_s});
      try {
        perf::AlphaBeta m = perf::fit_alpha_beta(timings, p);
        dist::log0("#");
        dist::log0("# alpha-beta fit of the ring (T = 2(p-1) alpha + 2(p-1)/p n beta, p = ", p,
                   "): alpha = ", m.alpha * 1e6, " us per message, beta = ", m.beta * 1e9,
                   " ns/B (", m.bandwidth_gbs(), " GB/s per link)");
        dist::log0("#       size   measured(us)  predicted(us)   error");
        for (const Row& row : rows) {
          double pred = perf::ring_allreduce_seconds(m, static_cast<double>(row.bytes), p);
          char line[128];
          std::snprintf(line, sizeof line, "%12lld %14.1f %14.1f %6.0f%%",
                        static_cast<long long>(row.bytes), row.ring_s * 1e6, pred * 1e6,
                        100.0 * (pred - row.ring_s) / row.ring_s);
          dist::log0(line);
        }
      } catch (const mgpu::Error& e) {
        dist::log0("# alpha-beta fit: not available: ", e.what());
      }
    }

    if (csv.is_open()) {
      csv << "bytes,count,ring_us,ring_busbw_gbs,library_us,library_busbw_gbs,wrong\n";
      for (const Row& row : rows)
        csv << row.bytes << ',' << row.count << ',' << row.ring_s * 1e6 << ','
            << (row.ring_s > 0 ? row.bytes / row.ring_s / 1e9 * bus_factor : 0) << ','
            << row.lib_s * 1e6 << ',' << row.bytes / row.lib_s / 1e9 * bus_factor << ','
            << row.wrong << '\n';
      csv.flush();
      MGPU_CHECK(csv.good(), "--csv: writing '", opt.csv, "' failed (is the disk full?)");
    }
    return total_wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    // Every rank failing alike (a flag, the memory check): one line and a clean exit.
    const std::string reason = std::string("bench_allreduce: ") + e.what();
    if (dist::failing_alike_everywhere(reason)) {
      dist::log0("error: ", e.what());
      return 1;
    }
    // One rank alone failed; ending the job keeps the others from waiting.
    dist::abort_job(reason);
  }
}
