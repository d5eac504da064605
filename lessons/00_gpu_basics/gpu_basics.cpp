// gpu_basics: lesson 00's program. Prints the device mapping, runs SAXPY and the sum on the
// chosen device, checks both against their CPU twins, and prints achieved bandwidth beside
// a plain device-to-device copy's, measured in the same run.
//
//   build/solutions/00_gpu_basics/gpu_basics --device cuda --size 16777216
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "basics.h"
#include "mgpu/copy.h"
#include "mgpu/device.h"
#include "mgpu/stream.h"
#include "mgpu/tensor.h"

namespace {

using mgpu::Device;
using mgpu::Tensor;
namespace l00 = mgpu::lesson00;

struct Options {
  std::string device = "auto";
  std::int64_t size = std::int64_t{1} << 24;
  int reps = 10;
  unsigned seed = 0;
};

// Median of `reps` timed runs of fn() on d, in milliseconds, after one untimed warm-up run
// (the first run pays for lazy initialisation and cold caches). Events time the GPU's own
// clock on CUDA; on the CPU they read the wall clock, and ops there are synchronous.
template <typename F>
double median_ms(const Device& d, int reps, F&& fn) {
  fn();
  mgpu::synchronize(d);
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    mgpu::Event start(true), stop(true);
    const mgpu::Stream stream = mgpu::Stream::current(d);
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    ms.push_back(stop.elapsed_ms(start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<float> random_floats(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v;
  try {
    v.resize(static_cast<std::size_t>(n));
  } catch (const std::exception&) {  // std::bad_alloc, or std::length_error beyond max_size()
    const long double bytes = static_cast<long double>(n) * sizeof(float);  // exact
    MGPU_FAIL("out of memory on cpu:0 (host memory): --size ", n, " asks for ", std::fixed,
              std::setprecision(0), bytes, " bytes (", std::setprecision(1), bytes / (1u << 30),
              " GiB) for each input array; use a smaller --size");
  }
  for (float& f : v) f = dist(gen);
  return v;
}

void report_check(const char* what, const char* against, double err, double tol) {
  std::printf("  check %-6s %-28s max rel err %.1e  %s\n", what, against, err,
              err <= tol ? "ok" : "FAILED");
  MGPU_CHECK(err <= tol, what, " differs from ", against, ": relative error ", err,
             " > tolerance ", tol);
}

// One row of the bandwidth table. GB/s = bytes read + bytes written, over the median time.
void report_bandwidth(const char* what, double bytes, double ms, double ceiling_gbs) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("  %-26s %9.3f ms %9.1f MB %9.1f GB/s", what, ms, bytes / 1e6, gbs);
  if (ceiling_gbs > 0) std::printf("  %5.0f%% of copy", 100.0 * gbs / ceiling_gbs);
  std::printf("\n");
}

int run(const Options& opt) {
  MGPU_CHECK(opt.size > 0, "--size must be positive, got ", opt.size);
  MGPU_CHECK(opt.reps > 0, "--reps must be positive, got ", opt.reps);
  const std::string dev_text =
      opt.device == "auto" ? (mgpu::cuda_available() ? "cuda" : "cpu") : opt.device;
  const Device dev = Device::parse(dev_text);
  const Device host = Device::cpu();
  const std::int64_t n = opt.size;
  const double f32_bytes = static_cast<double>(n) * sizeof(float);

  std::printf("lesson 00: GPU basics  (n = %lld floats, %.1f MB per tensor, median of %d runs)\n",
              static_cast<long long>(n), f32_bytes / 1e6, opt.reps);
  std::printf("devices:\n");
  std::istringstream mapping(mgpu::describe_mapping({dev}));
  for (std::string line; std::getline(mapping, line);) std::printf("  %s\n", line.c_str());
  const mgpu::DeviceProperties props = mgpu::device_properties(dev);
  if (dev.is_cuda() && props.memory_bandwidth_gbs > 0)
    std::printf("  spec sheet peak memory bandwidth of %s: %.0f GB/s\n", props.name.c_str(),
                props.memory_bandwidth_gbs);

  // Step 1) inputs made on the host, copied to the device (host -> device copies).
  const float a = 0.5f;
  const std::vector<float> xh = random_floats(n, opt.seed), yh = random_floats(n, opt.seed + 1);
  Tensor x_host = Tensor::from_vector(xh, {n}, host);
  Tensor y_host = Tensor::from_vector(yh, {n}, host);
  Tensor x = x_host.to(dev), y = y_host.to(dev);

  // Step 2) correctness first: the device against the CPU twin, the twin against f64 loops.
  std::printf("correctness:\n");
  {
    Tensor y_cpu = y_host.clone();
    l00::saxpy_cpu(a, x_host, y_cpu);
    const std::vector<float> twin = y_cpu.to_vector<float>();
    double err_ref = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double ref = static_cast<double>(a) * xh[i] + yh[i];
      const double scale = std::fabs(a * xh[i]) + std::fabs(yh[i]) + 1e-30;
      err_ref = std::max(err_ref, std::fabs(twin[i] - ref) / scale);
    }
    report_check("saxpy", "cpu twin vs f64 loop", err_ref, 1e-6);
    if (dev.is_cuda()) {
      Tensor y_dev = y.clone();
      l00::saxpy_(a, x, y_dev);
      const std::vector<float> got = y_dev.to_vector<float>();
      double err = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double scale = std::fabs(a * xh[i]) + std::fabs(yh[i]) + 1e-30;
        err = std::max(err, std::fabs(static_cast<double>(got[i]) - twin[i]) / scale);
      }
      report_check("saxpy", (dev.str() + " vs cpu twin").c_str(), err, 1e-6);
    }

    double ref = 0, abs_sum = 0;
    for (float v : xh) ref += v, abs_sum += std::fabs(v);
    const float twin_sum = l00::sum(x_host);
    report_check("sum", "cpu twin vs f64 loop", std::fabs(twin_sum - ref) / abs_sum, 1e-5);
    if (dev.is_cuda()) {
      const float got = l00::sum(x);
      report_check("sum", (dev.str() + " vs cpu twin").c_str(),
                   std::fabs(static_cast<double>(got) - twin_sum) / abs_sum, 1e-5);
    }
  }

  // Step 3) bandwidth. The ceiling is a plain copy on the same device in this same run: no
  // kernel of ours that reads and writes memory once can beat it by much.
  std::printf("bandwidth on %s (bytes read + written / median time):\n", dev.str().c_str());
  Tensor dst = Tensor::empty({n}, mgpu::DType::f32, dev);
  const double copy_ms = median_ms(dev, opt.reps, [&] { mgpu::copy_(dst, x); });
  const double copy_gbs = 2 * f32_bytes / (copy_ms * 1e-3) / 1e9;
  // On a CPU the copy is no ceiling (write-allocate, and the sum's twin follows the
  // kernel's tree in one thread): README §6.
  report_bandwidth(dev.is_cuda() ? "device copy (ceiling)" : "copy (reference, README 6)",
                   2 * f32_bytes, copy_ms, 0);
  report_bandwidth("saxpy (task 1)", 3 * f32_bytes,
                   median_ms(dev, opt.reps, [&] { l00::saxpy_(a, x, y); }), copy_gbs);
  report_bandwidth("sum (task 2)", f32_bytes,
                   median_ms(dev, opt.reps, [&] { (void)l00::sum(x); }), copy_gbs);

  // Step 4) the same copy with scattered reads (README: coalescing).
  for (std::int64_t stride : {1, 32, 4096}) {
    const std::int64_t m = n / stride * stride;
    if (m == 0) continue;
    Tensor src = x.view(0, {m}), out = dst.view(0, {m});
    const double ms = median_ms(dev, opt.reps, [&] { l00::strided_copy(out, src, stride); });
    const std::string label = "strided copy, stride " + std::to_string(stride);
    report_bandwidth(label.c_str(), 2.0 * m * sizeof(float), ms, copy_gbs);
  }

  // Step 5) host <-> device copies, pageable and pinned (README: memory spaces).
  if (dev.is_cuda()) {
    std::printf("host <-> %s copies:\n", dev.str().c_str());
    Tensor pinned = Tensor::empty_pinned({n});
    mgpu::copy_(pinned, x_host);
    report_bandwidth("host -> device, pageable", f32_bytes,
                     median_ms(dev, opt.reps, [&] { mgpu::copy_(dst, x_host); }), 0);
    report_bandwidth("host -> device, pinned", f32_bytes,
                     median_ms(dev, opt.reps, [&] { mgpu::copy_(dst, pinned); }), 0);
    report_bandwidth("device -> host, pageable", f32_bytes,
                     median_ms(dev, opt.reps, [&] { mgpu::copy_(x_host, x); }), 0);
    report_bandwidth("device -> host, pinned", f32_bytes,
                     median_ms(dev, opt.reps, [&] { mgpu::copy_(pinned, x); }), 0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lesson 00: run SAXPY and a sum reduction on a device, check them against "
               "their CPU twins, and print achieved GB/s beside a plain copy's."};
  Options opt;
  app.add_option("--device", opt.device, "auto, cpu or cuda (auto: cuda when a GPU is visible)")
      ->capture_default_str();
  app.add_option("--size", opt.size, "elements per tensor")->capture_default_str();
  app.add_option("--reps", opt.reps, "timed runs per measurement (the median is printed)")
      ->capture_default_str();
  app.add_option("--seed", opt.seed, "seed of the random inputs")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_basics: error: %s\n", e.what());
    return 1;
  }
}
