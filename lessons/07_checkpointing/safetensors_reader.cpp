// Lesson 07, task 2: the safetensors reader, which trusts nothing in the file
// (io::parse_safetensors_header, declared in mgpu/io/safetensors.h; io::parse_safetensors
// and io::load_safetensors read through it).
#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "mgpu/io/safetensors.h"
#include "mgpu/io/safetensors_json.h"

namespace mgpu::io {

namespace {

/// "[begin, end)" for messages.
[[maybe_unused]] std::string range(const TensorEntry& t) {
  return "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
}

/// A JSON value that is an integer >= 0 (nlohmann keeps those as unsigned numbers).
[[maybe_unused]] bool unsigned_integer(const nlohmann::json& j, std::uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<std::uint64_t>();
  return true;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view head, std::uint64_t file_size,
                                           const std::string& file) {
  SafetensorsHeader h;
  // What you have: dtype_from_safetensors(name, dtype); dtype_size(dtype); file, file_size;
  // h.header_bytes, h.metadata, h.tensors; head (the file's first bytes: at least the 8-byte
  // length and the header); is_valid_utf8(text); kMaxHeaderBytes; parse_header_json(text,
  // file) (refuses what is not one JSON object, and duplicate keys); range(entry) and
  // unsigned_integer(j, out) (above); refuse(file, tensor, SafetensorsRule::..., detail)
  // throws; std::sort; TensorEntry.
  // TODO(task2) BEGIN: h, the header of a valid file with its tensors sorted by offsets;
  // or, through refuse(), the first rule of SafetensorsRule the bytes break, naming the
  // file, the tensor and the rule (chapter §3: its table and its layout rule). Invariants:
  // nothing read outside `head`, no size trusted before it is checked, no arithmetic that
  // can overflow; h.header_bytes is N. Stuck: tools/hint 07 2 (about 75 lines).
  MGPU_FAIL("TODO(task2): parse_safetensors_header is not written yet "
            "(lessons/07_checkpointing/safetensors_reader.cpp); ", file, ": ", file_size,
            " bytes, ", head.size(), " of them given, ", h.tensors.size(), " entries checked");
  // TODO(task2) END
  return h;
}

}  // namespace mgpu::io
