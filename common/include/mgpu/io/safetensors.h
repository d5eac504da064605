/// @file safetensors.h
/// @brief The safetensors file format: writer and validating reader, byte for byte.
///
/// A safetensors file is
///
///     [8 bytes]  N, the header length, an unsigned little-endian integer
///     [N bytes]  the header: one UTF-8 JSON object, padded with spaces to a multiple of 8
///                { "__metadata__": {"key": "value", ...},              (optional)
///                  "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ... }
///     [the rest] every tensor's bytes, little-endian, row-major, packed back to back;
///                data_offsets [begin, end) count from the first byte after the header
///
/// The writer produces the same bytes as the reference implementation (the Python and Rust
/// `safetensors` packages): tensors ordered by dtype (the format's own dtype order, largest
/// first: I64, F64, F32, I32, BF16, F16) and then by name, compact JSON, `__metadata__`
/// first. The reader trusts nothing in the file: every rule it checks has a name
/// (SafetensorsRule), and a refusal names the file, the tensor and the rule.
///
/// The writer (serialize_safetensors) and the header's reader (parse_safetensors_header)
/// are lesson 07's tasks 1 and 2: declared here, defined in the lesson's exercise files;
/// the library is built with their reference (solutions/07_checkpointing/).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/dtype.h"
#include "mgpu/error.h"
#include "mgpu/tensor.h"

namespace mgpu::io {

/// Tensors by name. A std::map, so iteration (and every listing) is in name order.
using TensorDict = std::map<std::string, Tensor>;
/// The `__metadata__` object: strings to strings.
using Metadata = std::map<std::string, std::string>;

/// The largest header a reader accepts (the reference implementation's limit).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

/// The rules a safetensors reader checks, one per way a file can be malformed.
enum class SafetensorsRule {
  too_small,         ///< the file is shorter than the 8-byte header length
  header_too_large,  ///< N > kMaxHeaderBytes
  header_past_end,   ///< 8 + N is beyond the end of the file
  invalid_utf8,      ///< the header is not UTF-8
  invalid_json,      ///< the header is not one JSON object
  invalid_entry,     ///< an entry is not {"dtype", "shape", "data_offsets"}, or __metadata__ is not strings
  unknown_dtype,     ///< a dtype the format or this library does not know
  duplicate_name,    ///< a name (or a key inside an entry) appears twice
  offsets_reversed,  ///< data_offsets end before they begin
  overlap,           ///< two tensors share data bytes
  hole,              ///< data bytes that belong to no tensor
  past_end,          ///< a tensor's data runs past the end of the file
  byte_length,       ///< end - begin is not numel x dtype size
  overflow,          ///< a size does not fit in 64 bits
  trailing_data,     ///< the file goes on after the last tensor's data
};

/// "overlap", "hole", ...: the rule's name as used in messages and tests.
const char* rule_name(SafetensorsRule rule);
/// One sentence stating the rule, e.g. "the data must end at the end of the file".
const char* rule_text(SafetensorsRule rule);

/// The reader's refusal: a mgpu::Error that also carries the file, tensor and rule.
/// what() reads "FILE: tensor 'NAME': DETAIL (rule RULE: RULE TEXT)".
class SafetensorsError : public Error {
 public:
  /// `tensor` is empty when the problem is not about one tensor (the header as a whole).
  SafetensorsError(std::string file, std::string tensor, SafetensorsRule rule,
                   const std::string& detail);
  /// The file (or the name the bytes were given) that was refused.
  const std::string& file() const { return file_; }
  /// The tensor the refusal is about ("" for the header as a whole).
  const std::string& tensor() const { return tensor_; }
  /// Which rule the file broke.
  SafetensorsRule rule() const { return rule_; }

 private:
  std::string file_, tensor_;
  SafetensorsRule rule_;
};

/// Throws SafetensorsError(file, tensor, rule, detail).
[[noreturn]] void refuse(const std::string& file, const std::string& tensor,
                         SafetensorsRule rule, const std::string& detail);

/// The format's name of a dtype: "F32", "F64", "F16", "BF16", "I32", "I64".
const char* safetensors_dtype_name(DType dtype);
/// The dtype of a format name; false when this library has no such dtype.
bool dtype_from_safetensors(const std::string& name, DType& dtype);
/// The dtype's position in the format's list of dtypes (BOOL, U8, ..., F16, BF16, I32,
/// U32, F32, C64, F64, I64, U64). Writers order tensors by it, largest first, then by
/// name, so that 8-byte elements come first and every tensor starts aligned.
int safetensors_dtype_rank(DType dtype);
/// True when `text` is well-formed UTF-8 (no overlong forms, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view text);

/// One tensor of a header, as the file describes it.
struct TensorEntry {
  std::string name;          ///< the tensor's name
  DType dtype = DType::f32;  ///< element type
  Shape shape;               ///< sizes, outermost first ({} for a 0-d tensor)
  std::uint64_t begin = 0;   ///< first data byte, counted from the end of the header
  std::uint64_t end = 0;     ///< one past the last data byte
};

/// A validated header: its tensors in data order and its metadata.
struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  ///< sorted by data_offsets (and then by name)
  Metadata metadata;                 ///< empty when the file has no __metadata__
  std::uint64_t header_bytes = 0;    ///< N, the header's length
  /// Where the data starts in the file: 8 + N.
  std::uint64_t data_start() const { return 8 + header_bytes; }
};

/// Parses and validates a header. `head` holds the first bytes of a file of `file_size`
/// bytes: at least the 8-byte length and the header (more is ignored). Checks every rule
/// of SafetensorsRule, data layout included, and refuses with the first one broken.
/// `file` names the file in messages. Lesson 07's task 2 (safetensors_reader.cpp).
SafetensorsHeader parse_safetensors_header(std::string_view head, std::uint64_t file_size,
                                           const std::string& file);

/// The whole file for `tensors` and `metadata` (no __metadata__ when it is empty): the same
/// bytes as the reference implementation's writer. Throws mgpu::Error for a tensor name
/// that is "__metadata__" or not UTF-8, and for metadata that is not UTF-8. Lesson 07's
/// task 1 (safetensors_writer.cpp).
std::string serialize_safetensors(const TensorDict& tensors, const Metadata& metadata = {});

/// What a safetensors file holds.
struct SafetensorsFile {
  TensorDict tensors;  ///< every tensor, by name
  Metadata metadata;   ///< __metadata__ (empty when absent)
};

/// Parses a whole file held in memory (parse_safetensors_header, then each tensor's bytes);
/// tensors are placed on `device`. `file` names the bytes in messages.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& file,
                                  const Device& device = Device::cpu());
/// Reads and validates `path` (parse_safetensors_header); tensors are placed on `device`.
/// Reads the header first and then each tensor straight into its own buffer (memory use:
/// the tensors, once).
SafetensorsFile load_safetensors(const std::string& path, const Device& device = Device::cpu());
/// Writes `path` atomically (serialize_safetensors, then io::atomic_replace): a crash
/// leaves the old file or the new one, never a mix.
void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const Metadata& metadata = {});

}  // namespace mgpu::io
