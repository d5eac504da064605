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

void uniform_(Tensor& t, std::uint64_t seed, double lo, double hi, std::uint64_t offset) {
  detail::check_floating("uniform_", "t", t);
  if (t.numel() == 0) return;
  if (t.device().is_cuda()) {
    MGPU_IF_CUDA(detail::uniform_cuda(t, seed, lo, hi, offset));
    return;
  }
  detail::dispatch_floating(t.dtype(), "uniform_", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      // The uniform is exact in float; the affine map is done in double, then rounded
      // once to T. The CUDA kernel performs the very same roundings.
      const double u = random_uniform(seed, offset + static_cast<std::uint64_t>(i));
      p[i] = detail::narrow<T>(lo + (hi - lo) * u);
    }
  });
}

void normal_(Tensor& t, std::uint64_t seed, double mean, double stddev, std::uint64_t offset) {
  detail::check_floating("normal_", "t", t);
  if (t.numel() == 0) return;
  if (t.device().is_cuda()) {
    MGPU_IF_CUDA(detail::normal_cuda(t, seed, mean, stddev, offset));
    return;
  }
  detail::dispatch_floating(t.dtype(), "normal_", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const double z = detail::standard_normal(seed, offset + static_cast<std::uint64_t>(i));
      p[i] = detail::narrow<T>(mean + stddev * z);
    }
  });
}

}  // namespace mgpu
