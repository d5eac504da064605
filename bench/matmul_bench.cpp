// Matrix products in TFLOP/s (GFLOP/s on the CPU): mgpu::matmul beside the vendor BLAS
// called directly.
//
//   build/bench/bench_matmul --device cuda          f32, f16 and bf16 (f32 accumulation)
//   build/bench/bench_matmul --device cpu           f32 against cblas_sgemm (OpenBLAS)
//
// C[m, n] = A[m, k] B[k, n] costs 2*m*n*k floating-point operations. mgpu::matmul is itself
// a thin layer over cuBLAS / CBLAS, so the two columns should agree: a gap is overhead of
// ours (checks, allocation, a wrong transpose flag) and worth a look. The two are timed
// interleaved (mgpu, BLAS, mgpu, ...), on the same threads (--threads).
#include <cmath>

#include "bench_util.h"
#include "mgpu/ops.h"
#include "mgpu/threads.h"

#include <cblas.h>

namespace {

// C = A B for row-major A [m, k], B [k, n], C [m, n], through the vendor library directly.
// cuBLAS is column-major: a row-major C is a column-major C^T = B^T A^T, so B goes first.
void direct_gemm(mgpu::Tensor& c, const mgpu::Tensor& a, const mgpu::Tensor& b) {
  const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1));
  const int n = static_cast<int>(b.size(1));
  if (a.device().is_cpu()) {
    MGPU_CHECK(a.dtype() == mgpu::DType::f32, "direct_gemm: the CPU baseline is f32 only");
    // mgpu runs OpenBLAS one thread per call and splits the product among its own threads;
    // the baseline gets OpenBLAS's own threading, as many threads, for this call.
    mgpu::set_blas_threads(mgpu::num_threads());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data<float>(), k,
                b.data<float>(), n, 0.0f, c.data<float>(), n);
    mgpu::set_blas_threads(1);
    return;
  }
#ifdef MGPU_WITH_CUDA
  mgpu::DeviceGuard guard(a.device());  // a handle belongs to the GPU current at creation
  static cublasHandle_t handle = [] {
    cublasHandle_t h;
    MGPU_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  const auto stream = static_cast<cudaStream_t>(mgpu::Stream::current(a.device()).handle());
  MGPU_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const float alpha = 1.0f, beta = 0.0f;
  if (a.dtype() == mgpu::DType::f32) {
    MGPU_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                                  b.data<float>(), n, a.data<float>(), k, &beta,
                                  c.data<float>(), n));
  } else {
    const cudaDataType_t t = a.dtype() == mgpu::DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
    MGPU_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                                   b.raw_data(), t, n, a.raw_data(), t, k, &beta, c.raw_data(),
                                   t, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
#endif
}

// A square matrix of uniform values in [-1, 1), in `dtype`.
mgpu::Tensor random_matrix(std::int64_t s, std::uint64_t seed, mgpu::DType dtype,
                           const mgpu::Device& dev) {
  mgpu::Tensor t = mgpu::Tensor::empty({s, s}, dtype, dev);
  mgpu::uniform_(t, seed, -1.0, 1.0);
  return t;
}

// Largest |x - y| over the largest |y|: do the two products agree (same maths, maybe a
// different summation order)?
double relative_difference(const mgpu::Tensor& x, const mgpu::Tensor& y) {
  const std::vector<float> a = x.to_vector<float>(), b = y.to_vector<float>();
  double diff = 0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mgpu::matmul in TFLOP/s beside cuBLAS (GPU) or OpenBLAS (CPU) called directly"};
  bench::Options opt;
  opt.reps = 5;  // each run is long enough to time well
  bench::add_options(app, opt);
  CLI11_PARSE(app, argc, argv);
  return bench::guarded_main("bench_matmul", [&] {
    const mgpu::Device dev = bench::resolve_device(opt);
    std::vector<std::int64_t> sizes = opt.sizes;  // square: m = n = k
    if (sizes.empty()) {
      if (dev.is_cuda())
        sizes = {1024, 4096, 8192};
      else
        sizes = {256, 512, 1024};
    }
    std::vector<mgpu::DType> dtypes = {mgpu::DType::f32};
    if (dev.is_cuda()) dtypes = {mgpu::DType::f32, mgpu::DType::f16, mgpu::DType::bf16};
    bench::print_header("bench_matmul", dev, opt);
    const std::string baseline = dev.is_cuda() ? "cuBLAS" : "OpenBLAS";
    // A CPU does tens to hundreds of GFLOP/s, a GPU tens to hundreds of TFLOP/s.
    const std::string unit = dev.is_cuda() ? "TFLOP/s" : "GFLOP/s";
    const double unit_flops = dev.is_cuda() ? 1e12 : 1e9;
    std::printf("%-6s %6s %26s %14s %26s %16s %9s %9s\n", "dtype", "m=n=k", "mgpu ms",
                ("mgpu " + unit).c_str(), (baseline + " ms").c_str(),
                (baseline + " " + unit).c_str(), "% of BLAS", "rel diff");
    for (mgpu::DType dtype : dtypes) {
      for (std::int64_t s : sizes) {
        const mgpu::Tensor a = random_matrix(s, 4, dtype, dev);
        const mgpu::Tensor b = random_matrix(s, 5, dtype, dev);
        mgpu::Tensor c_mgpu, c_blas = mgpu::Tensor::empty({s, s}, dtype, dev);
        const double flops = 2.0 * static_cast<double>(s) * s * s;
        // Interleaved: mgpu, BLAS, mgpu, BLAS, ...
        const std::vector<bench::Timing> t = bench::interleaved_ms(dev, opt, {
            [&] { c_mgpu = mgpu::matmul(a, b); },
            [&] { direct_gemm(c_blas, a, b); },
        });
        const double mgpu_tf = flops / (t[0].median * 1e-3) / unit_flops;
        const double blas_tf = flops / (t[1].median * 1e-3) / unit_flops;
        std::printf("%-6s %6lld %26s %14.1f %26s %16.1f %8.0f%% %9.1e\n",
                    mgpu::dtype_name(dtype), static_cast<long long>(s), bench::spread(t[0], 3).c_str(),
                    mgpu_tf, bench::spread(t[1], 3).c_str(), blas_tf, 100.0 * mgpu_tf / blas_tf,
                    relative_difference(c_mgpu, c_blas));
      }
    }
  });
}
