/// @file checksum.h
/// @brief A checkpoint's integrity: a checksum of every tensor's bytes in the file's
/// `__metadata__`, verified on load; and the check that its numbers are finite.
///
/// The checksums are metadata strings ("checksum.<tensor name>": FNV-1a 64 of the tensor's
/// bytes, 16 hex digits), so any safetensors reader still reads the file, and the tensors'
/// bytes are those the writer would produce without them. The checkpoint layout adds them
/// before the writer runs (to_checkpoint_file) and load_checkpoint verifies them after the
/// reader: a flipped byte, a truncated tensor replaced by another, a tensor removed from the
/// file or added to it, each is refused naming the file and the tensor. A file without any
/// checksum (written before they were added) is still read, unverified; the resume line
/// says so.
#pragma once

#include <cstdint>
#include <string>

#include "mgpu/io/safetensors.h"

namespace mgpu::io {

/// The metadata key prefix of the checksums: "checksum." + tensor name.
inline constexpr const char* kChecksumPrefix = "checksum.";

/// FNV-1a (64 bits) of the tensor's bytes (copied to the host first), as 16 hex digits.
std::string tensor_checksum(const Tensor& tensor);

/// Sets `file`'s metadata "checksum.<name>" for every tensor, replacing any there (and
/// removing those of tensors the file no longer has).
void add_checksums(SafetensorsFile& file);

/// Verifies `file` against its checksums: every tensor has one and matches it, and every
/// checksum has its tensor. Throws mgpu::Error naming `source` and the tensor. Returns false
/// (nothing checked) when the file has no checksum at all (written before they were added).
bool verify_checksums(const SafetensorsFile& file, const std::string& source);

/// True when `file` carries checksums (add_checksums).
bool has_checksums(const Metadata& metadata);

/// Throws mgpu::Error naming `source` and the first tensor of `tensors` (floating dtypes)
/// that holds a NaN or an infinity, with the count and the first index; `section` is put in
/// front of the tensor's name in the message ("model.", "optim.").
void check_finite(const TensorDict& tensors, const std::string& section, const std::string& source);

}  // namespace mgpu::io
