// The ring collectives' chunk helpers (mgpu/dist/ring.h); the ring functions themselves are
// lesson 04's (solutions/04_collectives/).
#include "mgpu/dist/ring.h"

#include <algorithm>
#include <type_traits>

#include "dispatch.h"  // dispatch_all, to_compute/from_compute
#include "mgpu/ops.h"

namespace mgpu::dist {

ChunkRange chunk_range(std::int64_t n, int p, int i) {
  MGPU_CHECK(p >= 1 && i >= 0 && i < p, "chunk_range: chunk ", i, " of ", p, " does not exist");
  const std::int64_t base = n / p, extra = n % p;
  // Chunks 0..extra-1 have base+1 elements, the rest base; chunk i starts after i chunks.
  const std::int64_t begin = i * base + std::min<std::int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

Tensor chunk(const Tensor& flat, int p, int i) {
  MGPU_CHECK(flat.ndim() == 1, "chunk: expects a 1-D tensor (use data.reshape({-1})), got ",
             flat.str());
  const int k = ((i % p) + p) % p;
  ChunkRange r = chunk_range(flat.numel(), p, k);
  return flat.slice(r.begin, r.end);
}

void add_into(const Tensor& dst, const Tensor& src) {
  check_same_dtype("add_into", dst, src);
  check_same_device("add_into", dst, src);
  MGPU_CHECK(dst.numel() == src.numel(), "add_into: ", dst.str(), " vs ", src.str());
  if (dst.device().is_cuda()) {
    Tensor d = dst;
    add_(d, src);  // the library's kernel (floating dtypes)
    return;
  }
  mgpu::detail::dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const std::int64_t n = dst.numel();
    if constexpr (std::is_integral_v<T>) {
      for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
    } else {  // 16-bit floats add in float and round once, as the library's ops do
      for (std::int64_t i = 0; i < n; ++i)
        d[i] = mgpu::detail::from_compute<T>(mgpu::detail::to_compute(d[i]) +
                                              mgpu::detail::to_compute(s[i]));
    }
  });
}

}  // namespace mgpu::dist
