// Elementwise ops (add, add_, axpy_) in GB/s beside a plain copy on the same device.
//
//   build/bench/bench_elementwise --device cuda
//   build/bench/bench_elementwise --device cpu --size 16777216 --reps 20
//
// Each op reads two arrays and writes one, 12 bytes per f32 element; a copy reads one and
// writes one, 8 bytes. All are memory-bound, so the copy's GB/s is their ceiling; it is
// timed interleaved with the ops (copy, add, add_, axpy_, copy, ...).
#include "bench_util.h"
#include "mgpu/ops.h"

int main(int argc, char** argv) {
  CLI::App app{"Elementwise ops of mgpu (f32) in GB/s, beside a plain device copy"};
  bench::Options opt;
  bench::add_options(app, opt);
  CLI11_PARSE(app, argc, argv);
  return bench::guarded_main("bench_elementwise", [&] {
    const mgpu::Device dev = bench::resolve_device(opt);
    std::vector<std::int64_t> sizes = opt.sizes;
    if (sizes.empty()) {
      if (dev.is_cuda())
        sizes = {std::int64_t{1} << 20, std::int64_t{1} << 24, std::int64_t{1} << 27};
      else
        sizes = {std::int64_t{1} << 16, std::int64_t{1} << 20, std::int64_t{1} << 22};
    }
    bench::print_header("bench_elementwise", dev, opt);
    std::printf("%-22s %12s %28s %10s %10s\n", "op (f32)", "elements", "ms", "GB/s", "% of copy");
    for (std::int64_t n : sizes) {
      mgpu::Tensor a = mgpu::Tensor::empty({n}, mgpu::DType::f32, dev);
      mgpu::Tensor b = mgpu::Tensor::empty({n}, mgpu::DType::f32, dev);
      mgpu::Tensor c = mgpu::Tensor::empty({n}, mgpu::DType::f32, dev);
      mgpu::uniform_(a, 1, -1.0, 1.0);
      mgpu::uniform_(b, 2, -1.0, 1.0);
      const double bytes = 4.0 * static_cast<double>(n);  // one f32 array
      // The copy (the ceiling) and the ops, interleaved. add allocates its result; the
      // caching allocator makes that a lookup, not a malloc.
      const std::vector<bench::Timing> t = bench::interleaved_ms(dev, opt, {
          [&] { bench::plain_copy(c, a); },
          [&] { c = mgpu::add(a, b); },
          [&] { mgpu::add_(a, b); },
          [&] { mgpu::axpy_(a, 0.5, b); },
      });
      const double ceiling = bench::gbs(2 * bytes, t[0].median);
      auto row = [&](const char* op, double moved, const bench::Timing& ms) {
        std::printf("%-22s %12lld %28s %10.1f %9.0f%%\n", op, static_cast<long long>(n),
                    bench::spread(ms).c_str(), bench::gbs(moved, ms.median),
                    100.0 * bench::gbs(moved, ms.median) / ceiling);
      };
      row(dev.is_cuda() ? "copy (cudaMemcpy D2D)" : "copy (memcpy)", 2 * bytes, t[0]);
      row("c = add(a, b)", 3 * bytes, t[1]);
      row("add_(a, b)", 3 * bytes, t[2]);
      row("axpy_(a, 0.5, b)", 3 * bytes, t[3]);
    }
  });
}
