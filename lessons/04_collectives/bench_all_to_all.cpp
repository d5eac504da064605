// bench_all_to_all: lesson 04's second program. Times three all-to-alls of the same equal
// pieces, size after size: your pairwise exchange (task 5, pairwise_all_to_all.cpp), the
// library's ProcessGroup::all_to_all (the backend's: MPI_Alltoallv or NCCL's grouped
// send/recv), and a raw MPI_Alltoall on host memory (the floor: no engine thread, no checks,
// no staging). The three take turns, A B C A B C ..., for --rounds rounds, and each prints
// the median of its rounds with the fastest and the slowest: on a machine busy with other
// work the spread widens for all three alike instead of one of them losing by chance.
//
//   tools/mpirun -np 4 build/solutions/04_collectives/bench_all_to_all --max-size 16M
//   tools/mpirun -np 2 build/lessons/04_collectives/bench_all_to_all --device cuda --backend mpi
//
// A size is one rank's input (n bytes, p equal pieces). algbw = n / T; busbw = algbw (p-1)/p,
// nccl-tests' factor for all-to-all: the share of the input that leaves the rank. §4's model:
// T = (p-1) alpha + (p-1)/p n beta.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_clock.h"
#include "mgpu/app/flags.h"
#include "mgpu/app/ranks.h"
#include "mgpu/dist/all_to_all.h"
#include "mgpu/dist/dist.h"
#include "mgpu/stream.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace dist = mgpu::dist;
using lesson04_bench::kMinCalls;
using lesson04_bench::time_op;
using lesson04_bench::Timing;

struct Options {
  std::int64_t min_size = 1024, max_size = std::int64_t(16) << 20;
  int factor = 4, iters = 0, warmup = 2, rounds = 5;
  double seconds = 0.5;
  std::string device = "cpu", backend = "auto", csv;
};

// Rank r's input: element j of its piece for rank q is r*64 + q + (j % 997)/1024, exact in
// f32, so a piece from the wrong rank, for the wrong rank or cut wrong shows as #wrong.
Tensor rank_input(std::int64_t count, int p, int r, const Device& dev) {
  std::vector<float> v(static_cast<std::size_t>(count));
  const std::int64_t piece = count / p;
  for (std::int64_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(r * 64 + i / piece) + static_cast<float>(i % piece % 997) / 1024.0f;
  return Tensor::from_vector(v, {count}, dev);
}

struct Impl {
  Impl(std::string n, bool a, std::function<void()> f) : name(std::move(n)), available(a), op(std::move(f)) {}
  std::string name;
  bool available = true;
  std::function<void()> op;
  int iters = 0;
  Timing t;
};

}  // namespace

int main(int argc, char** argv) {
  dist::Runtime runtime(&argc, &argv);
  Options opt;
  CLI::App app{"Lesson 04: your pairwise all-to-all vs the library's all_to_all vs a raw "
               "MPI_Alltoall, medians of interleaved rounds"};
  app.add_option("--min-size", opt.min_size, "smallest input per rank (bytes; K, M, G suffixes)")
      ->transform(CLI::AsSizeValue(false))->capture_default_str();
  app.add_option("--max-size", opt.max_size, "largest input per rank")
      ->transform(CLI::AsSizeValue(false))->capture_default_str();
  app.add_option("--step-factor", opt.factor, "size multiplier from one row to the next")
      ->capture_default_str()->check(CLI::Range(2, 1024));
  app.add_option("--iters", opt.iters, "timed calls per round (0: as many as fit in --seconds, at least 3)")
      ->capture_default_str()->check(mgpu::app::non_negative_integer());
  app.add_option("--warmup", opt.warmup, "untimed calls per size and implementation first")
      ->capture_default_str()->check(mgpu::app::non_negative_integer());
  app.add_option("--rounds", opt.rounds, "timed rounds, the three taking turns (A B C A B C ...)")
      ->capture_default_str()->check(mgpu::app::positive_integer());
  app.add_option("--seconds", opt.seconds, "time per size and implementation, all rounds together, when --iters is 0")
      ->capture_default_str()->check(mgpu::app::real_in(0.001, 3600));
  app.add_option("--device", opt.device, "cpu, or cuda (each rank on cuda:local_rank)")->capture_default_str();
  app.add_option("--backend", opt.backend, "auto, mpi or nccl")->capture_default_str();
  app.add_option("--csv", opt.csv, "also write the table as CSV to this file (rank 0)");
  MGPU_PARSE_FLAGS(app, argc, argv);

  try {
    MGPU_CHECK(opt.min_size >= 4 && opt.min_size <= opt.max_size && opt.max_size <= (std::int64_t(4) << 30),
               "--min-size ", opt.min_size, " and --max-size ", opt.max_size,
               ": give 4 <= min <= max <= 4G bytes");
    const Device dev = dist::rank_device(opt.device);
    auto ctl = mgpu::app::quiet_cpu_group();  // the clock's barrier and max
    auto pg = dist::new_group(opt.backend, dev);  // the one being measured
    const int p = pg->size(), r = pg->rank();
    MGPU_CHECK(p > 1, "a world of 1 rank has nothing to exchange; start it with "
               "tools/mpirun -np 2 (or more)");
    std::ofstream csv;
    if (!opt.csv.empty() && r == 0) {
      csv.open(opt.csv);
      MGPU_CHECK(csv.is_open(), "--csv: cannot write '", opt.csv, "'");
      csv << "bytes,count,impl,median_us,min_us,max_us,busbw_gbs,wrong\n";
    }
    MPI_Comm comm;  // raw MPI on a communicator of its own: no message meets the library's
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    auto sync = [&] {
      if (dev.is_cuda()) mgpu::synchronize(dev);
    };

    // Is the pairwise all-to-all there at all? An unfinished exercise throws at once, alike.
    std::string hand_missing;
    try {
      Tensor probe_in = rank_input(4 * p, p, r, dev), probe_out = Tensor::empty({4 * p}, mgpu::DType::f32, dev);
      dist::pairwise_all_to_all(*pg, probe_out, probe_in);
    } catch (const mgpu::Error& e) {
      hand_missing = e.what();
    }
    const double bus_factor = double(p - 1) / p;
    dist::log0("# bench_all_to_all: ", p, " ranks on ", dist::num_nodes(), " node(s), backend ",
               pg->backend_name(), ", device ", opt.device, ", dtype f32, median (min..max) of ",
               opt.rounds, " interleaved rounds per size, load average ",
               lesson04_bench::load_average());
    if (!hand_missing.empty()) dist::log0("# pairwise: not run: ", hand_missing);
    if (dev.is_cuda()) dist::log0("# MPI_Alltoall: not run: CUDA tensors (it times host memory only)");
    dist::log0("#       size      count |  pairwise (task 5): us  (min..max)   busbw |"
               "  library all_to_all: us  (min..max)  busbw |  MPI_Alltoall: us  (min..max)  busbw | #wrong");

    std::int64_t total_wrong = 0;
    for (std::int64_t bytes = opt.min_size; bytes <= opt.max_size; bytes *= opt.factor) {
      const std::int64_t count = std::max<std::int64_t>(p, bytes / 4 / p * p);  // p equal pieces
      Tensor input = rank_input(count, p, r, dev);
      Tensor hand_out = Tensor::zeros({count}, mgpu::DType::f32, dev);
      Tensor lib_out = Tensor::zeros({count}, mgpu::DType::f32, dev);
      std::vector<float> host_in = input.to_vector<float>(), host_out(host_in.size());
      const int piece = static_cast<int>(count / p);

      std::vector<Impl> impls;  // A, B, C
      impls.emplace_back("pairwise", hand_missing.empty(), [&] { dist::pairwise_all_to_all(*pg, hand_out, input); sync(); });
      impls.emplace_back("library", true, [&] { pg->all_to_all(lib_out, input).wait(); sync(); });
      impls.emplace_back("MPI_Alltoall", !dev.is_cuda(), [&] {
        MPI_Alltoall(host_in.data(), piece, MPI_FLOAT, host_out.data(), piece, MPI_FLOAT, comm);
      });
      // Correctness first: each result against the library's, element by element.
      std::int64_t wrong = 0;
      impls[1].op();
      std::vector<float> ref = lib_out.to_vector<float>();
      if (impls[0].available) {
        impls[0].op();
        std::vector<float> got = hand_out.to_vector<float>();
        for (std::size_t i = 0; i < ref.size(); ++i) wrong += got[i] != ref[i];
      }
      if (impls[2].available) {
        impls[2].op();
        for (std::size_t i = 0; i < ref.size(); ++i) wrong += host_out[i] != ref[i];
      }
      Tensor w = Tensor::from_vector(std::vector<std::int64_t>{wrong}, {1});
      ctl->all_reduce(w).wait();
      wrong = w.to_vector<std::int64_t>()[0];
      total_wrong += wrong;

      // Then the clock: warm-up, a call count that every rank agrees on, interleaved rounds.
      for (Impl& im : impls) {
        if (!im.available) continue;
        for (int i = 0; i < opt.warmup; ++i) im.op();
        const double once = time_op(*ctl, im.op, 1);
        im.iters = opt.iters > 0 ? opt.iters
                                 : static_cast<int>(std::clamp(opt.seconds / opt.rounds / std::max(once, 1e-9),
                                                               double(kMinCalls), 1000.0));
      }
      for (int round = 0; round < opt.rounds; ++round)
        for (Impl& im : impls)
          if (im.available) im.t.rounds.push_back(time_op(*ctl, im.op, im.iters));

      const double n = static_cast<double>(count) * 4;
      std::string line;
      char cell[96];
      std::snprintf(cell, sizeof cell, "%12.0f %10lld |", n, static_cast<long long>(count));
      line += cell;
      for (const Impl& im : impls) {
        if (im.available) {
          const double med = im.t.median();
          std::snprintf(cell, sizeof cell, " %10.1f (%8.1f..%8.1f) %6.2f |", med * 1e6,
                        im.t.min() * 1e6, im.t.max() * 1e6, n / med / 1e9 * bus_factor);
          if (csv.is_open())
            csv << n << ',' << count << ',' << im.name << ',' << med * 1e6 << ',' << im.t.min() * 1e6
                << ',' << im.t.max() * 1e6 << ',' << n / med / 1e9 * bus_factor << ',' << wrong << '\n';
        } else {
          std::snprintf(cell, sizeof cell, " %10s (%8s..%8s) %6s |", "-", "-", "-", "-");
        }
        line += cell;
      }
      std::snprintf(cell, sizeof cell, " %6lld", static_cast<long long>(wrong));
      dist::log0(line + cell);
      if (bytes > opt.max_size / opt.factor) break;  // the next size would pass max (or overflow)
    }
    dist::log0("# Out of bounds values : ", total_wrong, total_wrong ? " WRONG" : " OK");
    MPI_Comm_free(&comm);
    if (csv.is_open()) {
      csv.flush();
      MGPU_CHECK(csv.good(), "--csv: writing '", opt.csv, "' failed (is the disk full?)");
    }
    return total_wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    // Every rank failing alike (a flag): one line and a clean exit.
    const std::string reason = std::string("bench_all_to_all: ") + e.what();
    if (dist::failing_alike_everywhere(reason)) {
      dist::log0("error: ", e.what());
      return 1;
    }
    dist::abort_job(reason);  // one rank alone failed: ending the job keeps the others from waiting
  }
}
