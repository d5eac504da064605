// The 16-bit casts of the precision policy round as PyTorch's do: mgpu's cast() over a
// million float bit patterns (every sign, exponent and leading mantissa, with the rounded-
// away bits at zero, at the halfway points and beside them) and over all 65536 16-bit
// values back to float, digested and compared with the digests of PyTorch's .half(),
// .bfloat16() and .float() on the same patterns (torch_cast_digests.py; PyTorch 1.13).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mgpu/ops.h"
#include "mgpu/tensor.h"

using namespace mgpu;

namespace {

// The lower halves of the float patterns, as in torch_cast_digests.py.
const std::uint32_t kLows[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x2FFF,
                               0x3000, 0x3001, 0x7FFF, 0x8000, 0x8001, 0xBFFF, 0xC000, 0xFFFF};

std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

Tensor float_patterns() {
  std::vector<float> v;
  for (std::uint32_t lo : kLows)
    for (std::uint32_t hi = 0; hi < 65536; ++hi) {
      const std::uint32_t bits = (hi << 16) | lo;
      float f;
      std::memcpy(&f, &bits, 4);
      v.push_back(f);
    }
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
}

// The digest of a 16-bit tensor, every NaN counted as `nan_bits` (payloads are not
// semantics). Little-endian host assumed, as the script writes little-endian bytes.
std::uint64_t digest16(const Tensor& t, std::uint16_t nan_bits) {
  const Tensor as_f32 = cast(t, DType::f32);
  const auto* bits = static_cast<const std::uint16_t*>(t.raw_data());
  std::uint64_t h = 1469598103934665603ull;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const std::uint16_t b = std::isnan(as_f32.data<float>()[i]) ? nan_bits : bits[i];
    h = fnv1a64(&b, 2, h);
  }
  return h;
}

std::uint64_t digest32(const Tensor& t) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const float f = t.data<float>()[i];
    std::uint32_t b = 0x7FC00000u;
    if (!std::isnan(f)) std::memcpy(&b, &f, 4);
    h = fnv1a64(&b, 4, h);
  }
  return h;
}

// All 65536 bit patterns as a tensor of `dtype` (f16 or bf16).
Tensor all_16bit(DType dtype) {
  Tensor t = Tensor::empty({65536}, dtype);
  auto* bits = static_cast<std::uint16_t*>(t.raw_data());
  for (std::uint32_t u = 0; u < 65536; ++u) bits[u] = static_cast<std::uint16_t>(u);
  return t;
}

}  // namespace

TEST_CASE("casts: f32 -> f16 and bf16 round exactly as PyTorch's", "[amp][cast][torch]") {
  const Tensor f = float_patterns();
  REQUIRE(f.numel() == 1048576);
  CHECK(digest16(cast(f, DType::f16), 0x7E00) == 0xcf6b5ef03f2915c3ull);
  CHECK(digest16(cast(f, DType::bf16), 0x7FC0) == 0xe1ad3559dd7b1403ull);
}

TEST_CASE("casts: f16 and bf16 -> f32 are PyTorch's, for all 65536 values", "[amp][cast][torch]") {
  CHECK(digest32(cast(all_16bit(DType::f16), DType::f32)) == 0xf260868b5ff4c523ull);
  CHECK(digest32(cast(all_16bit(DType::bf16), DType::f32)) == 0x1981eb542d8da203ull);
}
