// fill_, uniform_, normal_ on CUDA: one grid-stride loop each. Every element's value
// depends only on its index (counter-based RNG), so the thread that owns element i
// computes it directly and the result cannot depend on the launch geometry.
#include "cuda_util.cuh"
#include "mgpu/rng.h"
#include "ops_cuda.h"
#include "random_normal.h"

namespace mgpu::detail {

// Bits is an unsigned integer as wide as the element (2, 4 or 8 bytes).
template <typename Bits>
__global__ void fill_bits_kernel(Bits* out, std::int64_t n, Bits value) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = value;
}

template <typename Bits>
static void launch_fill(Tensor& t, std::uint64_t bits) {
  const std::int64_t n = t.numel();
  fill_bits_kernel<<<grid_for(n), kBlock, 0, launch_stream(t.device())>>>(
      device_ptr<Bits>(t), n, static_cast<Bits>(bits));
  MGPU_CUDA_CHECK_LAUNCH();
}

void fill_bits_cuda(Tensor& t, std::uint64_t bits) {
  switch (dtype_size(t.dtype())) {
    case 2: launch_fill<std::uint16_t>(t, bits); break;
    case 4: launch_fill<std::uint32_t>(t, bits); break;
    case 8: launch_fill<std::uint64_t>(t, bits); break;
    default: MGPU_FAIL("fill_: unexpected element size for ", t.str());
  }
}

// The two draws: U(seed, i), exact in double, and N(seed, i) with the same Box-Muller as
// the CPU. log/cos on the GPU may differ from the host's libm in the last bit, so normal_
// agrees with the CPU to ~1e-15 relative, not bit for bit; uniform_ is bit-identical.
struct UniformDraw {
  __device__ static double at(std::uint64_t seed, std::uint64_t i) { return random_uniform(seed, i); }
};
struct NormalDraw {
  __device__ static double at(std::uint64_t seed, std::uint64_t i) { return standard_normal(seed, i); }
};

// Element i <- shift + scale * Draw(seed, offset + i), rounded once to T.
// __dmul_rn / __dadd_rn forbid nvcc from fusing the multiply-add into an FMA: with the
// separate roundings the CPU performs, the affine map is bit-identical to the CPU's.
template <typename Draw, typename T>
__global__ void affine_random_kernel(T* out, std::uint64_t seed, double shift, double scale,
                                     std::uint64_t offset, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const double r = Draw::at(seed, offset + static_cast<std::uint64_t>(i));
    const double v = __dadd_rn(shift, __dmul_rn(scale, r));
    out[i] = from_compute<T>(static_cast<compute_t<T>>(v));
  }
}

void uniform_cuda(Tensor& t, std::uint64_t seed, double lo, double hi, std::uint64_t offset) {
  launch_grid_stride("uniform_", t,
                     [](auto tag) { return affine_random_kernel<UniformDraw, decltype(tag)>; }, t,
                     seed, lo, hi - lo, offset);
}

void normal_cuda(Tensor& t, std::uint64_t seed, double mean, double stddev, std::uint64_t offset) {
  launch_grid_stride("normal_", t,
                     [](auto tag) { return affine_random_kernel<NormalDraw, decltype(tag)>; }, t,
                     seed, mean, stddev, offset);
}

}  // namespace mgpu::detail
