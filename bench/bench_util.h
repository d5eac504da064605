// Shared by the benchmarks: options, interleaved median timing, the ceilings they are
// measured against.
//
// A benchmark prints numbers; it never passes or fails. Each row puts an mgpu op beside a
// ceiling measured in the same run on the same device, interleaved with it (ceiling, op,
// ceiling, op, ...): a plain copy for bandwidth-bound ops, the vendor BLAS called directly
// for matmul.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mgpu/app/flags.h"
#include "mgpu/device.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"
#include "mgpu/threads.h"

#ifdef MGPU_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace bench {

/// The machine's cores: the default of every benchmark's --threads.
inline int default_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

/// --threads: the library's CPU threads, default the cores.
inline void add_threads_option(CLI::App& app, int& threads) {
  app.add_option("--threads", threads, "CPU threads of the library (its loops and its matrix products; default: the cores)")
      ->capture_default_str()
      ->check(mgpu::app::positive_integer(4096));
}

struct Options {
  std::string device = "auto";
  std::vector<std::int64_t> sizes;  // empty: the benchmark's default for the device
  int reps = 10;
  int warmup = 2;
  int threads = default_threads();
};

/// --device, --size (repeatable), --reps, --warmup, --threads (CLI11 adds --help).
inline void add_options(CLI::App& app, Options& opt) {
  app.add_option("--device", opt.device, "auto, cpu or cuda (auto: cuda when a GPU is visible)")
      ->capture_default_str();
  app.add_option("--size", opt.sizes, "problem size(s); repeat for several (default: a sweep)")
      ->check(mgpu::app::positive_integer(std::int64_t{1} << 40));
  app.add_option("--reps", opt.reps, "timed repetitions; the median is printed")
      ->capture_default_str()
      ->check(mgpu::app::positive_integer(1000000));
  app.add_option("--warmup", opt.warmup, "untimed runs first (allocator, caches, clocks)")
      ->capture_default_str()
      ->check(mgpu::app::non_negative_integer(1000000));
  add_threads_option(app, opt.threads);
}

/// "0.52 1.03 1.20": the 1, 5 and 15 minute load averages (other work on the machine).
inline std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

inline mgpu::Device resolve_device(const Options& opt) {
  if (opt.device == "auto") return mgpu::cuda_available() ? mgpu::Device::cuda(0) : mgpu::Device::cpu(0);
  return mgpu::Device::parse(opt.device);
}

/// The header every benchmark prints: what ran where, how it was timed, the CPU threads
/// (set here from --threads) and the load average. Call it before timing anything.
inline void print_header(const char* name, const mgpu::Device& d, const Options& opt) {
  std::istringstream mapping(mgpu::describe_mapping({d}));  // throws when d does not exist
  std::string line;
  std::getline(mapping, line);
  mgpu::set_num_threads(opt.threads);
  std::printf("%s on %s; median [min-max] of %d interleaved runs after %d warm-up runs\n", name,
              line.c_str(), opt.reps, opt.warmup);
  std::printf("CPU: %s; load average %s\n", mgpu::cpu_threading_summary().c_str(),
              load_average().c_str());
}

/// Median, fastest and slowest of a contender's runs, in milliseconds.
struct Timing {
  double median = 0, min = 0, max = 0;
};

/// Times every function of `fns` opt.reps times, interleaved: fns[0], fns[1], ..., then
/// fns[0] again, so that a change in the machine's load hits an op and its ceiling alike
/// (each gets opt.warmup untimed runs first). CUDA events time the device's own clock on
/// the current stream (queued launches are not mistaken for finished work); on the CPU the
/// same events read the wall clock and the ops are synchronous.
inline std::vector<Timing> interleaved_ms(const mgpu::Device& d, const Options& opt,
                                          const std::vector<std::function<void()>>& fns) {
  for (const auto& fn : fns)
    for (int i = 0; i < opt.warmup; ++i) fn();
  mgpu::synchronize(d);
  std::vector<std::vector<double>> ms(fns.size());
  for (int r = 0; r < opt.reps; ++r)
    for (std::size_t f = 0; f < fns.size(); ++f) {
      mgpu::Event start(true), stop(true);
      const mgpu::Stream s = mgpu::Stream::current(d);
      start.record(s);
      fns[f]();
      stop.record(s);
      stop.synchronize();
      ms[f].push_back(stop.elapsed_ms(start));
    }
  std::vector<Timing> out;
  for (std::vector<double>& v : ms) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    out.push_back({n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()});
  }
  return out;
}

/// "0.123 [0.120-0.200]": a timing as median [min-max].
inline std::string spread(const Timing& t, int decimals = 4) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*f [%.*f-%.*f]", decimals, t.median, decimals, t.min, decimals,
                t.max);
  return buf;
}

/// The bandwidth ceiling: dst <- src as a plain memcpy (CPU) or cudaMemcpyAsync
/// device-to-device on the current stream (CUDA), not through mgpu.
inline void plain_copy(mgpu::Tensor& dst, const mgpu::Tensor& src) {
  if (src.device().is_cpu()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
#ifdef MGPU_WITH_CUDA
  mgpu::DeviceGuard guard(src.device());
  const auto stream = static_cast<cudaStream_t>(mgpu::Stream::current(src.device()).handle());
  MGPU_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                  cudaMemcpyDeviceToDevice, stream));
#endif
}

inline double gbs(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

/// Runs a benchmark body, turning any error into one line on stderr and exit status 1.
template <typename F>
int guarded_main(const char* name, F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace bench
