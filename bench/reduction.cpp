// Reductions (sum of a whole tensor, sum along the last axis) in GB/s beside a plain copy.
//
//   build/bench/bench_reduction --device cuda
//
// A sum reads its input once and writes almost nothing: 4 bytes per f32 element. The copy
// (read + write, 8 bytes per element) is the ceiling; a good reduction gets close to it and
// on some GPUs above it, since pure reads are cheaper for the memory than a read-write mix.
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
    std::printf("%-26s %12s %10s %10s %10s\n", "op (f32)", "elements", "ms", "GB/s", "% of copy");
    for (std::int64_t n : sizes) {
      mgpu::Tensor x = mgpu::Tensor::empty({n}, mgpu::DType::f32, dev);
      mgpu::Tensor dst = mgpu::Tensor::empty({n}, mgpu::DType::f32, dev);
      mgpu::uniform_(x, 3, -1.0, 1.0);
      const double bytes = 4.0 * static_cast<double>(n);

      const double copy_ms = bench::median_ms(dev, opt, [&] { bench::plain_copy(dst, x); });
      const double ceiling = bench::gbs(2 * bytes, copy_ms);
      auto row = [&](const char* op, double moved, double ms) {
        std::printf("%-26s %12lld %10.4f %10.1f %9.0f%%\n", op, static_cast<long long>(n), ms,
                    bench::gbs(moved, ms), 100.0 * bench::gbs(moved, ms) / ceiling);
      };
      row(dev.is_cuda() ? "copy (cudaMemcpy D2D)" : "copy (memcpy)", 2 * bytes, copy_ms);
      mgpu::Tensor s;
      row("sum(x)", bytes, bench::median_ms(dev, opt, [&] { s = mgpu::sum(x); }));
      // Along an axis: over the last one (one sum per row, e.g. per sample) and over the
      // first (one sum per column, e.g. a bias gradient over the batch).
      const std::int64_t cols = 1024;
      if (n % cols == 0) {
        const mgpu::Tensor x2 = x.reshape({n / cols, cols});
        row("sum(x[rows, 1024], -1)", bytes,
            bench::median_ms(dev, opt, [&] { s = mgpu::sum(x2, -1); }));
        const mgpu::Tensor x3 = x.reshape({cols, n / cols});
        row("sum(x[1024, cols], 0)", bytes,
            bench::median_ms(dev, opt, [&] { s = mgpu::sum(x3, 0); }));
      }
    }
  });
}
