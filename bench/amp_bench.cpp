// Mixed precision, measured: training-step time in fp32, bf16 and fp16 (with GradScaler)
// for lesson 01's MLP and CNN and for a large MLP where GEMMs dominate, and the GEMM of
// the autocast policy (16-bit operands, f32 result) in TFLOP/s beside cuBLAS called
// directly with the same types. bench/amp_torch.py prints the same step table for
// torch.autocast on the same machine.
//
//   build/bench/bench_amp                      cuda when a GPU is visible, else cpu
//   build/bench/bench_amp --device cpu --reps 5
//
// Contenders take turns (fp32, bf16, fp16, fp32, ...; ours, cuBLAS, ours, ...) so that a
// change of clock or load hits all of them alike; each row prints the median with the
// min and max, and the machine's load average is printed before and after. On the CPU
// f16/bf16 are storage formats computed in f32: expect them slower than fp32 there.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mgpu/amp/all.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"

namespace {

using mgpu::Device;
using mgpu::DType;
using mgpu::Shape;
using mgpu::Tensor;
namespace nn = mgpu::nn;
namespace amp = mgpu::amp;

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats_of(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

/// Times each contender `reps` times, taking turns; returns their milliseconds.
std::vector<Stats> interleaved(const Device& d, int reps, int warmup,
                               const std::vector<std::function<void()>>& contenders) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& f : contenders) f();
  mgpu::synchronize(d);
  std::vector<std::vector<double>> ms(contenders.size());
  for (int r = 0; r < reps; ++r)
    for (std::size_t c = 0; c < contenders.size(); ++c) {
      mgpu::Event start(true), stop(true);
      const mgpu::Stream s = mgpu::Stream::current(d);
      start.record(s);
      contenders[c]();
      stop.record(s);
      stop.synchronize();
      ms[c].push_back(stop.elapsed_ms(start));
    }
  std::vector<Stats> out;
  for (auto& m : ms) out.push_back(stats_of(m));
  return out;
}

void print_load(const char* when) {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3)
    std::printf("load average %s: %.2f %.2f %.2f\n", when, load[0], load[1], load[2]);
}

// ---- GEMM ------------------------------------------------------------------------------

/// C (f32) = A B for row-major A [m, k], B [k, n] (16-bit or f32), through cuBLAS directly:
/// the baseline of the policy's GEMM. Column-major cuBLAS computes C^T = B^T A^T.
void direct_gemm_f32_out(Tensor& c, const Tensor& a, const Tensor& b) {
#ifdef MGPU_WITH_CUDA
  const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1));
  const int n = static_cast<int>(b.size(1));
  mgpu::DeviceGuard guard(a.device());
  static cublasHandle_t handle = [] {
    cublasHandle_t h;
    MGPU_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  const auto stream = static_cast<cudaStream_t>(mgpu::Stream::current(a.device()).handle());
  MGPU_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = a.dtype() == DType::f32   ? CUDA_R_32F
                           : a.dtype() == DType::f16 ? CUDA_R_16F
                                                     : CUDA_R_16BF;
  MGPU_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b.raw_data(),
                                 t, n, a.raw_data(), t, k, &beta, c.raw_data(), CUDA_R_32F, n,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
#else
  (void)c, (void)a, (void)b;
#endif
}

void bench_gemm(const Device& dev, const std::vector<std::int64_t>& sizes, int reps, int warmup) {
  std::printf("\nGEMM C[f32] = A B, m = n = k; %s\n",
              dev.is_cuda() ? "ours (mgpu::matmul with an f32 result) beside cublasGemmEx "
                              "with the same types and CUBLAS_COMPUTE_32F"
                            : "ours only (the CPU widens 16-bit operands to f32 for OpenBLAS)");
  // A GPU does tens to hundreds of TFLOP/s, a CPU tens to hundreds of GFLOP/s.
  const char* unit = dev.is_cuda() ? "TFLOP/s" : "GFLOP/s";
  const double unit_flop = dev.is_cuda() ? 1e12 : 1e9;
  std::printf("%-6s %6s %22s %9s %22s %9s %8s\n", "A, B", "size", "ours ms [min, max]", unit,
              "cuBLAS ms [min, max]", unit, "share");
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (std::int64_t s : sizes) {
      Tensor a = Tensor::empty({s, s}, t, dev), b = Tensor::empty({s, s}, t, dev);
      mgpu::uniform_(a, 1, -1.0, 1.0);
      mgpu::uniform_(b, 2, -1.0, 1.0);
      Tensor ours, direct = Tensor::empty({s, s}, DType::f32, dev);
      std::vector<std::function<void()>> fs = {[&] { ours = mgpu::matmul(a, b, false, false, DType::f32); }};
      if (dev.is_cuda()) fs.push_back([&] { direct_gemm_f32_out(direct, a, b); });
      const std::vector<Stats> st = interleaved(dev, reps, warmup, fs);
      const double flop = 2.0 * s * s * s / unit_flop;
      std::printf("%-6s %6lld %8.3f [%5.3f, %5.3f] %9.2f", mgpu::dtype_name(t),
                  static_cast<long long>(s), st[0].median, st[0].min, st[0].max,
                  flop / (st[0].median * 1e-3));
      if (st.size() > 1)
        std::printf(" %8.3f [%5.3f, %5.3f] %9.2f %7.0f%%", st[1].median, st[1].min, st[1].max,
                    flop / (st[1].median * 1e-3), 100.0 * st[1].median / st[0].median);
      std::printf("\n");
    }
}

// ---- training steps ----------------------------------------------------------------------

/// "mlp", "cnn" (lesson 01's) or "large": an MLP of 4 Linear layers, width `width`, where
/// the GEMMs are most of the work.
std::shared_ptr<nn::Sequential> make_model(const std::string& name, std::int64_t width) {
  if (name != "large") return nn::make_model(name);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Linear>(width, width));
  for (int i = 0; i < 2; ++i) {
    m->add(std::make_shared<nn::ReLU>());
    m->add(std::make_shared<nn::Linear>(width, width));
  }
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(width, 10));
  return m;
}

void bench_steps(const Device& dev, std::int64_t batch, std::int64_t width, int reps, int warmup) {
  std::printf("\ntraining step (forward, loss, backward, SGD momentum 0.9): ms [min, max]\n");
  std::printf("%-5s %6s %24s %24s %24s %8s %8s\n", "model", "batch", "fp32", "bf16",
              "fp16 + GradScaler", "bf16 x", "fp16 x");
  for (const std::string name : {"mlp", "cnn", "large"}) {
    const std::int64_t b = name == "large" ? width : batch;
    const Shape in = name == "large" ? Shape{b, width} : Shape{b, 1, 28, 28};
    Tensor x = Tensor::empty(in, DType::f32, dev);
    mgpu::uniform_(x, 3, -1.0, 1.0);
    Tensor y = mgpu::cast(Tensor::full({b}, 3.0, DType::f32, dev), DType::i64);
    struct Run {
      std::shared_ptr<nn::Sequential> model;
      std::unique_ptr<mgpu::optim::SGD> sgd;
      std::unique_ptr<amp::GradScaler> scaler;
      DType dtype;
      bool autocast;
    };
    std::vector<Run> runs;
    for (int p = 0; p < 3; ++p) {
      nn::manual_seed(1);
      Run r;
      r.model = make_model(name, width);
      r.model->to(dev);
      mgpu::optim::SGDOptions o;
      o.lr = 0.01;
      o.momentum = 0.9;
      r.sgd = std::make_unique<mgpu::optim::SGD>(r.model->parameters(), o);
      amp::GradScalerOptions so;
      so.enabled = p == 2;
      r.scaler = std::make_unique<amp::GradScaler>(so);
      r.dtype = p == 1 ? DType::bf16 : DType::f16;
      r.autocast = p != 0;
      runs.push_back(std::move(r));
    }
    std::vector<std::function<void()>> fs;
    for (Run& r : runs)
      fs.push_back([&r, &x, &y] {
        nn::CrossEntropyLoss loss;
        r.sgd->zero_grad();
        Tensor logits;
        if (r.autocast) {
          amp::Autocast region(r.dtype);
          logits = r.model->forward(x);
        } else {
          logits = r.model->forward(x);
        }
        loss.forward(logits, y);
        r.model->backward(r.scaler->scale(loss.backward()));
        r.scaler->step(*r.sgd);
        r.scaler->update();
      });
    const std::vector<Stats> st = interleaved(dev, reps, warmup, fs);
    std::printf("%-5s %6lld", name.c_str(), static_cast<long long>(b));
    for (const Stats& s : st) std::printf(" %9.3f [%6.3f, %6.3f]", s.median, s.min, s.max);
    std::printf(" %7.2fx %7.2fx\n", st[0].median / st[1].median, st[0].median / st[2].median);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mixed precision: step times of fp32 / bf16 / fp16 and the policy's GEMM beside cuBLAS"};
  bench::Options opt;
  opt.reps = 10;
  std::int64_t batch = 256, width = 0;
  bench::add_options(app, opt);
  app.add_option("--batch-size", batch, "batch of lesson 01's models")->capture_default_str();
  app.add_option("--width", width, "width and batch of the large MLP (default 8192 on a GPU, "
                                   "1024 on the CPU)");
  CLI11_PARSE(app, argc, argv);
  return bench::guarded_main("bench_amp", [&] {
    const Device dev = bench::resolve_device(opt);
    if (width == 0) width = dev.is_cuda() ? 8192 : 1024;
    std::vector<std::int64_t> sizes = opt.sizes;
    if (sizes.empty()) sizes = dev.is_cuda() ? std::vector<std::int64_t>{2048, 4096, 8192}
                                             : std::vector<std::int64_t>{512};
    bench::print_header("bench_amp", dev, opt);
    print_load("before");
    bench_gemm(dev, sizes, opt.reps, opt.warmup);
    bench_steps(dev, batch, width, opt.reps, opt.warmup);
    print_load("after");
  });
}
