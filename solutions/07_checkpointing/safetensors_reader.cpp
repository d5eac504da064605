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
  // Step 1) the 8-byte length N, and a header that fits in the file.
  if (file_size < 8 || head.size() < 8)
    refuse(file, "", SafetensorsRule::too_small, std::to_string(file_size) + " bytes");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[static_cast<std::size_t>(i)]);
  if (n > kMaxHeaderBytes)
    refuse(file, "", SafetensorsRule::header_too_large, "N = " + std::to_string(n));
  if (8 + n > file_size)
    refuse(file, "", SafetensorsRule::header_past_end,
           "N = " + std::to_string(n) + " in a file of " + std::to_string(file_size) + " bytes");
  MGPU_CHECK(head.size() >= 8 + n, "parse_safetensors_header: ", file, ": ", head.size(),
             " bytes given, the header needs ", 8 + n);
  const std::string_view text = head.substr(8, static_cast<std::size_t>(n));
  h.header_bytes = n;

  // Step 2) UTF-8, then JSON (one object, no duplicate keys).
  if (!is_valid_utf8(text)) refuse(file, "", SafetensorsRule::invalid_utf8, "ill-formed UTF-8");
  const nlohmann::json header = parse_header_json(text, file);

  // Step 3) each entry.
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object())
        refuse(file, name, SafetensorsRule::invalid_entry, "not an object of strings");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string())
          refuse(file, name, SafetensorsRule::invalid_entry, "value of '" + key + "' is not a string");
        h.metadata[key] = v.get<std::string>();
      }
      continue;
    }
    const std::string entry = name;  // a lambda cannot capture a structured binding (C++17)
    const auto bad = [&](const std::string& what) {
      refuse(file, entry, SafetensorsRule::invalid_entry, what);
    };
    if (!value.is_object()) bad("not an object");
    if (!value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets"))
      bad("needs dtype, shape and data_offsets");
    TensorEntry e;
    e.name = name;
    if (!value["dtype"].is_string()) bad("dtype is not a string");
    if (!dtype_from_safetensors(value["dtype"].get<std::string>(), e.dtype))
      refuse(file, name, SafetensorsRule::unknown_dtype, "dtype " + value["dtype"].dump());
    if (!value["shape"].is_array()) bad("shape is not an array");
    for (const nlohmann::json& d : value["shape"]) {
      std::uint64_t v = 0;
      if (!unsigned_integer(d, v)) bad("shape holds " + d.dump());
      if (v > static_cast<std::uint64_t>(INT64_MAX))
        refuse(file, name, SafetensorsRule::overflow, "dimension " + d.dump());
      e.shape.push_back(static_cast<std::int64_t>(v));
    }
    const nlohmann::json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !unsigned_integer(offsets[0], e.begin) ||
        !unsigned_integer(offsets[1], e.end))
      bad("data_offsets is " + offsets.dump());
    h.tensors.push_back(std::move(e));
  }

  // Step 4) the data: sorted by offsets, the tensors must tile it exactly.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  const std::uint64_t data_size = file_size - 8 - n;
  std::uint64_t cursor = 0;
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const TensorEntry& e = h.tensors[i];
    if (e.end < e.begin) refuse(file, e.name, SafetensorsRule::offsets_reversed, range(e));
    if (e.begin < cursor)
      refuse(file, e.name, SafetensorsRule::overlap, range(e) + " overlaps '" + h.tensors[i - 1].name + "'");
    if (e.begin > cursor)
      refuse(file, e.name, SafetensorsRule::hole, range(e) + " starts after byte " + std::to_string(cursor));
    if (e.end > data_size)
      refuse(file, e.name, SafetensorsRule::past_end,
             range(e) + " in " + std::to_string(data_size) + " bytes of data");
    std::uint64_t size = dtype_size(e.dtype);
    for (std::int64_t d : e.shape) {
      const auto du = static_cast<std::uint64_t>(d);
      if (du != 0 && size > UINT64_MAX / du)
        refuse(file, e.name, SafetensorsRule::overflow, "numel x dtype size");
      size *= du;
    }
    if (e.end - e.begin != size)
      refuse(file, e.name, SafetensorsRule::byte_length,
             range(e) + " holds " + std::to_string(e.end - e.begin) + " bytes, the tensor " +
                 std::to_string(size));
    cursor = e.end;
  }
  if (cursor != data_size)
    refuse(file, "", SafetensorsRule::trailing_data,
           std::to_string(data_size - cursor) + " bytes after the last tensor");
  // TODO(task2) END
  return h;
}

}  // namespace mgpu::io
