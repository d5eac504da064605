// The bits of NaNs after cast: the CPU keeps the sign and the top of the payload, as
// nan_bits.h predicts (checked here against the CPU cast), and ([gpu]) the CUDA cast gives
// the very same bits, where the GPU's own conversions would give the canonical NaN.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "mgpu/ops.h"
#include "mgpu/tensor.h"
#include "ops/nan_bits.h"

using namespace mgpu;
namespace nb = mgpu::detail;

namespace {

// Quiet NaN patterns of each floating type: both signs, short and long payloads (the long
// ones lose their low bits on the way down). Signaling NaNs (quiet bit clear) are kept
// apart: no arithmetic makes them, and whether the CPU quiets one depends on whether the
// compiler folds its float -> double -> float round trip away (GCC does), so only their
// sign is compared.
const std::vector<std::uint32_t> kF32 = {0x7FC00000u, 0xFFC00000u, 0x7FC00001u, 0xFFF12345u,
                                         0x7FFFFFFFu};
const std::vector<std::uint64_t> kF64 = {0x7FF8000000000000ull, 0xFFF8000000000000ull,
                                         0x7FF8000000000001ull, 0xFFFDEADBEEF12345ull};
const std::vector<std::uint16_t> kF16 = {0x7E00u, 0xFE00u, 0x7E01u, 0xFFFFu};
const std::vector<std::uint16_t> kBF16 = {0x7FC0u, 0xFFC0u, 0x7FC1u, 0xFFFFu};
const std::vector<std::uint32_t> kF32Signaling = {0x7F800001u, 0xFFA00000u};
const std::vector<std::uint64_t> kF64Signaling = {0x7FF0000000000001ull, 0xFFF4000000000000ull};
const std::vector<std::uint16_t> kF16Signaling = {0x7C01u, 0xFD00u};
const std::vector<std::uint16_t> kBF16Signaling = {0x7F81u, 0xFFA0u};

// A tensor of `dtype` holding these raw bits (8, 4 or 2 bytes each), on `device`.
template <typename Bits>
Tensor from_bits(const std::vector<Bits>& bits, DType dtype, const Device& device = Device::cpu()) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(bits.size())}, dtype);
  REQUIRE(dtype_size(dtype) == sizeof(Bits));
  std::memcpy(t.raw_data(), bits.data(), bits.size() * sizeof(Bits));
  return t.to(device);
}

// The raw bits of every element of `t` (copied to the host first), widened to 64 bits.
std::vector<std::uint64_t> bits_of(const Tensor& any) {
  Tensor t = any.to(Device::cpu());
  std::vector<std::uint64_t> out(static_cast<std::size_t>(t.numel()));
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  const std::size_t size = dtype_size(t.dtype());
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint64_t v = 0;
    std::memcpy(&v, p + i * size, size);  // little-endian: the low bytes
    out[i] = v;
  }
  return out;
}

std::uint64_t narrowed(std::uint64_t wide, DType to) {
  switch (to) {
    case DType::f64: return nb::nan_to_f64(wide);
    case DType::f32: return nb::nan_to_f32(wide);
    case DType::f16: return nb::nan_to_f16(wide);
    case DType::bf16: return nb::nan_to_bf16(wide);
    default: return 0;  // a NaN cast to an integer is 0 (saturate.h)
  }
}

struct NanSource {
  DType dtype;
  Tensor tensor;                    // on the CPU
  std::vector<std::uint64_t> wide;  // each element widened as nan_bits.h says
};

// The NaNs of `bits` as a tensor of `dtype`, each also widened by `widen`.
template <class Bits, class Widen>
NanSource nan_source(DType dtype, const Bits& bits, Widen widen) {
  NanSource s{dtype, from_bits(bits, dtype), {}};
  for (auto b : bits) s.wide.push_back(widen(b));
  return s;
}

std::vector<NanSource> nan_sources() {
  return {nan_source(DType::f32, kF32, nb::nan_wide_from_f32),
          nan_source(DType::f64, kF64, nb::nan_wide_from_f64),
          nan_source(DType::f16, kF16, nb::nan_wide_from_f16),
          nan_source(DType::bf16, kBF16, nb::nan_wide_from_bf16)};
}

const std::vector<DType> kAll = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

std::vector<Tensor> signaling_sources() {
  return {from_bits(kF32Signaling, DType::f32), from_bits(kF64Signaling, DType::f64),
          from_bits(kF16Signaling, DType::f16), from_bits(kBF16Signaling, DType::bf16)};
}

// For a floating dtype: (is NaN, sign) of each element's bits; integers: the value.
std::vector<std::pair<bool, bool>> nan_and_sign(const Tensor& t) {
  std::vector<std::pair<bool, bool>> out;
  const std::size_t bits = dtype_size(t.dtype()) * 8;
  for (std::uint64_t v : bits_of(t)) {
    const bool sign = (v >> (bits - 1)) & 1u;
    bool nan = false;
    switch (t.dtype()) {
      case DType::f64: nan = (v & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; break;
      case DType::f32: nan = (v & 0x7FFFFFFFu) > 0x7F800000u; break;
      case DType::f16: nan = (v & 0x7FFFu) > 0x7C00u; break;
      case DType::bf16: nan = (v & 0x7FFFu) > 0x7F80u; break;
      default: nan = v == 0; break;  // a NaN cast to an integer is 0
    }
    out.emplace_back(nan, sign && is_floating(t.dtype()));
  }
  return out;
}

}  // namespace

TEST_CASE("cast keeps a NaN's sign and the top of its payload on the CPU, as nan_bits.h says",
          "[ops][cast]") {
  for (const NanSource& src : nan_sources()) {
    for (DType to : kAll) {
      INFO("cast " << dtype_name(src.dtype) << " -> " << dtype_name(to));
      std::vector<std::uint64_t> want;
      for (std::uint64_t w : src.wide) want.push_back(narrowed(w, to));
      CHECK(bits_of(cast(src.tensor, to)) == want);
    }
  }
}

TEST_CASE("CUDA cast gives the CPU's NaN bits", "[gpu][ops][cast]") {
  for (const NanSource& src : nan_sources()) {
    const Tensor on_gpu = src.tensor.to(Device::cuda(0));
    for (DType to : kAll) {
      INFO("cast " << dtype_name(src.dtype) << " -> " << dtype_name(to));
      CHECK(bits_of(cast(on_gpu, to)) == bits_of(cast(src.tensor, to)));
    }
  }
}

TEST_CASE("a signaling NaN stays a NaN of its sign on the CPU", "[ops][cast]") {
  for (const Tensor& src : signaling_sources())
    for (DType to : kAll) {
      INFO("cast " << dtype_name(src.dtype()) << " -> " << dtype_name(to));
      const auto got = nan_and_sign(cast(src, to));
      const auto signs = nan_and_sign(src);
      for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].first);
        CHECK(got[i].second == (signs[i].second && is_floating(to)));
      }
    }
}

TEST_CASE("CUDA cast of a signaling NaN: a NaN of the CPU's sign", "[gpu][ops][cast]") {
  for (const Tensor& src : signaling_sources())
    for (DType to : kAll) {
      INFO("cast " << dtype_name(src.dtype()) << " -> " << dtype_name(to));
      CHECK(nan_and_sign(cast(src.to(Device::cuda(0)), to)) == nan_and_sign(cast(src, to)));
    }
}
