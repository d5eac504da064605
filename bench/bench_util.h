// Shared by the benchmarks: options, median timing, the ceilings they are measured against.
//
// A benchmark prints numbers; it never passes or fails. Each row puts an mgpu op beside a
// ceiling measured in the same run on the same device: a plain copy for bandwidth-bound
// ops, the vendor BLAS called directly for matmul.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"

#ifdef MGPU_WITH_CUDA
#include "cuda_check.h"
#endif

namespace bench {

struct Options {
  std::string device = "auto";
  std::vector<std::int64_t> sizes;  // empty: the benchmark's default for the device
  int reps = 10;
  int warmup = 2;
};

/// --device, --size (repeatable), --reps, --warmup (CLI11 adds --help).
inline void add_options(CLI::App& app, Options& opt) {
  app.add_option("--device", opt.device, "auto, cpu or cuda (auto: cuda when a GPU is visible)")
      ->capture_default_str();
  app.add_option("--size", opt.sizes, "problem size(s); repeat for several (default: a sweep)")
      ->check(CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--reps", opt.reps, "timed repetitions; the median is printed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", opt.warmup, "untimed runs first (allocator, caches, clocks)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
}

inline mgpu::Device resolve_device(const Options& opt) {
  if (opt.device == "auto") return mgpu::cuda_available() ? mgpu::Device::cuda(0) : mgpu::Device::cpu(0);
  return mgpu::Device::parse(opt.device);
}

/// The header every benchmark prints: what ran where, and how it was timed.
inline void print_header(const char* name, const mgpu::Device& d, const Options& opt) {
  std::istringstream mapping(mgpu::describe_mapping({d}));  // throws when d does not exist
  std::string line;
  std::getline(mapping, line);
  std::printf("%s on %s; median of %d runs after %d warm-up runs\n", name, line.c_str(), opt.reps,
              opt.warmup);
}

/// Median time of fn() in milliseconds. CUDA events time the device's own clock on the
/// current stream (so queued launches are not mistaken for finished work); on the CPU the
/// same events read the wall clock and the ops are synchronous.
template <typename F>
double median_ms(const mgpu::Device& d, const Options& opt, F&& fn) {
  for (int i = 0; i < opt.warmup; ++i) fn();
  mgpu::synchronize(d);
  std::vector<double> ms;
  for (int r = 0; r < opt.reps; ++r) {
    mgpu::Event start(true), stop(true);
    const mgpu::Stream s = mgpu::Stream::current(d);
    start.record(s);
    fn();
    stop.record(s);
    stop.synchronize();
    ms.push_back(stop.elapsed_ms(start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
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
