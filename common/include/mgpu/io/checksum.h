/// @file checksum.h
/// @brief A checkpoint's integrity: a checksum of every tensor's bytes in the file's
/// `__metadata__`, verified on load; and the check that its numbers are finite.
///
/// The checksums are metadata strings ("checksum.<tensor name>": FNV-1a 64 of the tensor's
/// bytes, 16 hex digits; offset basis 14695981039346656037, prime 1099511628211, as any
/// outside tool computes it), so any safetensors reader still reads the file, and the tensors'
/// bytes are those the writer would produce without them. The writer also sets
/// "checksum_algorithm": "fnv1a64". Files written before that key existed used the offset
/// basis 1469598103934665603 (a digit short of FNV's); they still load, verified with that
/// basis, and checksum_note says so. The checkpoint layout adds them
/// before the writer runs (to_checkpoint_file) and load_checkpoint verifies them after the
/// reader: a flipped byte, a truncated tensor replaced by another, a tensor removed from the
/// file or added to it, each is refused naming the file and the tensor. A file without any
/// checksum (written before they were added) is still read, unverified; the resume line
/// says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mgpu/io/safetensors.h"

namespace mgpu::io {

/// The metadata key prefix of the checksums: "checksum." + tensor name.
inline constexpr const char* kChecksumPrefix = "checksum.";

/// FNV-1a 64's offset basis.
inline constexpr std::uint64_t kFnv1aOffsetBasis = 14695981039346656037ull;
/// FNV-1a 64's prime.
inline constexpr std::uint64_t kFnv1aPrime = 1099511628211ull;
/// The offset basis of the files written before "checksum_algorithm" (not FNV's: a digit
/// short); such files are still verified with it.
inline constexpr std::uint64_t kLegacyChecksumBasis = 1469598103934665603ull;
/// The metadata key naming the checksums' algorithm.
inline constexpr const char* kChecksumAlgorithmKey = "checksum_algorithm";
/// Its value in the files written now.
inline constexpr const char* kChecksumAlgorithm = "fnv1a64";

/// FNV-1a 64 of `n` bytes, continuing from `h` (the offset basis for a fresh hash).
std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = kFnv1aOffsetBasis);
/// `h` as 16 hex digits (how checksums are written).
std::string checksum_hex(std::uint64_t h);

/// FNV-1a (64 bits) of the tensor's bytes (copied to the host first), as 16 hex digits;
/// `basis` the offset basis (kLegacyChecksumBasis for old files).
std::string tensor_checksum(const Tensor& tensor, std::uint64_t basis = kFnv1aOffsetBasis);

/// Sets `file`'s metadata "checksum.<name>" for every tensor, replacing any there (and
/// removing those of tensors the file no longer has).
void add_checksums(SafetensorsFile& file);

/// Verifies `file` against its checksums: every tensor has one and matches it, and every
/// checksum has its tensor. Throws mgpu::Error naming `source` and the tensor. Returns false
/// (nothing checked) when the file has no checksum at all (written before they were added).
bool verify_checksums(const SafetensorsFile& file, const std::string& source);

/// True when `file` carries checksums (add_checksums).
bool has_checksums(const Metadata& metadata);
/// True when the checksums are those of a file written before "checksum_algorithm": checksums
/// and no such key (verified with kLegacyChecksumBasis).
bool legacy_checksums(const Metadata& metadata);
/// The one-line note a resume prints about `metadata`'s checksums: "" for FNV-1a 64 ones;
/// otherwise "note: ..." saying the tensors were not verified (no checksums) or were verified
/// with the old offset basis.
std::string checksum_note(const Metadata& metadata);

/// Throws mgpu::Error naming `source` and the first tensor of `tensors` (floating dtypes)
/// that holds a NaN or an infinity, with the count and the first index; `section` is put in
/// front of the tensor's name in the message ("model.", "optim."). `flag_hint`: the message
/// names --allow-non-finite-checkpoint (programs that have that flag).
void check_finite(const TensorDict& tensors, const std::string& section, const std::string& source,
                  bool flag_hint = true);

}  // namespace mgpu::io
