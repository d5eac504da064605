// fill_, uniform_, normal_: the CPU loops, and the dispatch to fill_random.cu.
#include <cstring>

#include "convert.h"
#include "dispatch.h"
#include "mgpu/ops.h"
#include "mgpu/rng.h"
#include "op_checks.h"
#include "ops_cuda.h"
#include "random_normal.h"

namespace mgpu {

void fill_(Tensor& t, double value) {
  detail::check_defined_operand("fill_", "t", t);
  if (t.numel() == 0) return;
  detail::dispatch_all(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = detail::narrow<T>(value);  // saturates for integers, rounds for floats
    if (t.device().is_cuda()) {
      // A fill is a bit pattern repeated: the kernel only needs the element's bits.
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof v);
      MGPU_IF_CUDA(detail::fill_bits_cuda(t, bits));
    } else {
      T* p = t.data<T>();
      for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = v;
    }
  });
}

namespace {

// Element i <- shift + scale * draw(offset + i). The draw is exact in double; the affine
// map is done in double, then rounded once to T. The CUDA kernels (fill_random.cu) perform
// the very same roundings; `cuda` is the CUDA branch.
template <typename Cuda, typename Draw>
void fill_affine(const char* op, Tensor& t, double shift, double scale, std::uint64_t offset,
                 Cuda cuda, Draw draw) {
  detail::check_floating(op, "t", t);
  if (t.numel() == 0) return;
  detail::cpu_or_cuda(t, op, cuda, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      p[i] = detail::narrow<T>(shift + scale * draw(offset + static_cast<std::uint64_t>(i)));
  });
}

}  // namespace

void uniform_(Tensor& t, std::uint64_t seed, double lo, double hi, std::uint64_t offset) {
  fill_affine(
      "uniform_", t, lo, hi - lo, offset,
      [&] { MGPU_IF_CUDA(detail::uniform_cuda(t, seed, lo, hi, offset)); },
      [&](std::uint64_t i) { return random_uniform(seed, i); });
}

void normal_(Tensor& t, std::uint64_t seed, double mean, double stddev, std::uint64_t offset) {
  fill_affine(
      "normal_", t, mean, stddev, offset,
      [&] { MGPU_IF_CUDA(detail::normal_cuda(t, seed, mean, stddev, offset)); },
      [&](std::uint64_t i) { return detail::standard_normal(seed, i); });
}

}  // namespace mgpu
