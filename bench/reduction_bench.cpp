// Reductions (sum of a whole tensor, sum along the last axis) in GB/s beside a plain copy.
//
//   build/bench/bench_reduction --device cuda
//
// A sum reads its input once and writes almost nothing: 4 bytes per f32 element. The copy
// (read + write, 8 bytes per element) is the ceiling; a good reduction gets close to it and
// on some GPUs above it, since pure reads are cheaper for the memory than a read-write mix.
// The copy is timed interleaved with the sums (copy, sum, ..., copy, sum, ...).
#include "bench_util.h"
#include "mgpu/ops.h"

int main(int argc, char** argv) {
  CLI::App app{"Sum reductions of mgpu (f32) in GB/s, beside a plain device copy"};
  bench::Options opt;
  bench::add_options(app, opt);
  CLI11_PARSE(app, argc, argv);
  return bench::guarded_main("bench_reduction", [&] {
    const mgpu::Device dev = bench::resolve_device(opt);
    std::vector<std::int64_t> sizes = opt.sizes;
    if (sizes.empty()) {
      if (dev.is_cuda())
        sizes = {std::int64_t{1} << 20, std::int64_t{1} << 24, std::int64_t{1} << 28};
      else
        sizes = {std::int64_t{1} << 16, std::int64_t{1} << 20, std::int64_t{1} << 22};
    }
    bench::print_header("bench_reduction", dev, opt);
    std::printf("%-26s %12s %28s %10s %10s\n", "op (f32)", "elements", "ms", "GB/s", "% of copy");
    for (std::int64_t n : sizes) {
      mgpu::Tensor x = mgpu::Tensor::empty({n}, mgpu::DType::f32, dev);
      mgpu::Tensor dst = mgpu::Tensor::empty({n}, mgpu::DType::f32, dev);
      mgpu::uniform_(x, 3, -1.0, 1.0);
      const double bytes = 4.0 * static_cast<double>(n);
      mgpu::Tensor s;
      // The copy (the ceiling) and the sums, interleaved. Along an axis: over the last one
      // (one sum per row, e.g. per sample) and over the first (one sum per column, e.g. a
      // bias gradient over the batch).
      const std::int64_t cols = 1024;
      std::vector<std::function<void()>> fns = {[&] { bench::plain_copy(dst, x); },
                                                [&] { s = mgpu::sum(x); }};
      std::vector<const char*> names = {dev.is_cuda() ? "copy (cudaMemcpy D2D)" : "copy (memcpy)",
                                        "sum(x)"};
      const mgpu::Tensor x2 = n % cols == 0 ? x.reshape({n / cols, cols}) : x;
      const mgpu::Tensor x3 = n % cols == 0 ? x.reshape({cols, n / cols}) : x;
      if (n % cols == 0) {
        fns.push_back([&] { s = mgpu::sum(x2, -1); });
        names.push_back("sum(x[rows, 1024], -1)");
        fns.push_back([&] { s = mgpu::sum(x3, 0); });
        names.push_back("sum(x[1024, cols], 0)");
      }
      const std::vector<bench::Timing> t = bench::interleaved_ms(dev, opt, fns);
      const double ceiling = bench::gbs(2 * bytes, t[0].median);
      for (std::size_t i = 0; i < t.size(); ++i) {
        const double moved = i == 0 ? 2 * bytes : bytes;
        std::printf("%-26s %12lld %28s %10.1f %9.0f%%\n", names[i], static_cast<long long>(n),
                    bench::spread(t[i]).c_str(), bench::gbs(moved, t[i].median),
                    100.0 * bench::gbs(moved, t[i].median) / ceiling);
      }
    }
  });
}
