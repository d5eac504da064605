// A checkpoint's integrity: per-tensor checksums in the metadata, and finite numbers
// (checksum.h).
#include "mgpu/io/checksum.h"

#include <cstdio>
#include <cstring>

#include "starts_with.h"

namespace mgpu::io {

namespace {

// True when the element of `bits` (an IEEE float of `bytes` bytes, or bfloat16) is a NaN or
// an infinity: its exponent bits are all ones.
template <typename Bits>
bool non_finite(Bits bits, Bits exponent_mask) {
  return (bits & exponent_mask) == exponent_mask;
}

}  // namespace

std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * kFnv1aPrime;
  return h;
}

std::string checksum_hex(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string tensor_checksum(const Tensor& tensor, std::uint64_t basis) {
  const Tensor host = tensor.to(Device::cpu());
  return checksum_hex(fnv1a64(host.raw_data(), host.nbytes(), basis));
}

bool legacy_checksums(const Metadata& metadata) {
  return has_checksums(metadata) && metadata.count(kChecksumAlgorithmKey) == 0;
}

std::string checksum_note(const Metadata& metadata) {
  if (!has_checksums(metadata))
    return "note: the file has no checksums (written before they were added): its tensors "
           "were not verified";
  if (legacy_checksums(metadata))
    return "note: the file's checksums use the old offset basis 1469598103934665603 (not FNV-1a "
           "64's 14695981039346656037): verified with it; the next save writes FNV-1a 64";
  return "";
}

bool has_checksums(const Metadata& metadata) {
  const auto it = metadata.lower_bound(kChecksumPrefix);
  return it != metadata.end() && starts_with(it->first, kChecksumPrefix);
}

void add_checksums(SafetensorsFile& file) {
  for (auto it = file.metadata.lower_bound(kChecksumPrefix);
       it != file.metadata.end() && starts_with(it->first, kChecksumPrefix);)
    it = file.metadata.erase(it);
  for (const auto& [name, t] : file.tensors) file.metadata[kChecksumPrefix + name] = tensor_checksum(t);
  file.metadata[kChecksumAlgorithmKey] = kChecksumAlgorithm;
}

bool verify_checksums(const SafetensorsFile& file, const std::string& source) {
  if (!has_checksums(file.metadata)) return false;
  const auto algorithm = file.metadata.find(kChecksumAlgorithmKey);
  MGPU_CHECK(algorithm == file.metadata.end() || algorithm->second == kChecksumAlgorithm, source,
             ": the file's __metadata__ says checksum_algorithm \"", algorithm->second,
             "\"; this reader knows \"", kChecksumAlgorithm, "\" only");
  // Files without the key were written with the old offset basis (see checksum.h).
  const std::uint64_t basis = algorithm == file.metadata.end() ? kLegacyChecksumBasis : kFnv1aOffsetBasis;
  const std::string prefix = kChecksumPrefix;
  for (const auto& [name, t] : file.tensors) {
    const auto it = file.metadata.find(prefix + name);
    MGPU_CHECK(it != file.metadata.end(), source, ": tensor '", name,
               "' has no checksum in the file's __metadata__: it was added after the file was "
               "written; the file is not the checkpoint that was saved (restore it from a copy, "
               "or resume from another checkpoint)");
    const std::string actual = tensor_checksum(t, basis);
    MGPU_CHECK(it->second == actual, source, ": tensor '", name, "' fails its checksum (",
               basis == kFnv1aOffsetBasis ? "fnv1a64 " : "fnv1a64 with the old offset basis ",
               actual, ", the file says ", it->second, "): its bytes changed after it was saved "
               "(a damaged disk or copy, or an edit); resume from another checkpoint");
  }
  for (auto it = file.metadata.lower_bound(prefix);
       it != file.metadata.end() && starts_with(it->first, prefix); ++it) {
    const std::string name = it->first.substr(prefix.size());
    MGPU_CHECK(file.tensors.count(name) != 0, source, ": tensor '", name,
               "' is missing: the file's __metadata__ has its checksum, so the checkpoint that "
               "was saved had it (the file was edited); resume from another checkpoint");
  }
  return true;
}

void check_finite(const TensorDict& tensors, const std::string& section, const std::string& source,
                  bool flag_hint) {
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) continue;
    const Tensor host = t.to(Device::cpu());
    const auto* p = static_cast<const unsigned char*>(host.raw_data());
    const std::int64_t n = host.numel();
    std::int64_t bad = 0, first = -1;
    for (std::int64_t i = 0; i < n; ++i) {
      bool nf = false;
      switch (host.dtype()) {
        case DType::f32: { std::uint32_t b; std::memcpy(&b, p + 4 * i, 4); nf = non_finite<std::uint32_t>(b, 0x7F800000u); break; }
        case DType::f64: { std::uint64_t b; std::memcpy(&b, p + 8 * i, 8); nf = non_finite<std::uint64_t>(b, 0x7FF0000000000000ull); break; }
        case DType::f16: { std::uint16_t b; std::memcpy(&b, p + 2 * i, 2); nf = non_finite<std::uint16_t>(b, 0x7C00u); break; }
        case DType::bf16: { std::uint16_t b; std::memcpy(&b, p + 2 * i, 2); nf = non_finite<std::uint16_t>(b, 0x7F80u); break; }
        default: break;
      }
      if (nf) {
        if (first < 0) first = i;
        ++bad;
      }
    }
    MGPU_CHECK(bad == 0, source, ": tensor '", section, name, "' holds ", bad,
               " NaN or infinite value(s) (the first at flat index ", first, " of ",
               shape_str(t.shape()), "): the run that saved it had diverged; resume from an "
               "earlier checkpoint", flag_hint ? " (or pass --allow-non-finite-checkpoint to load "
               "it anyway, for debugging)" : "");
  }
}

}  // namespace mgpu::io
